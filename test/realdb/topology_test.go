package realdb

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
	"github.com/fleetdb/fleetdb/test/e2e"
	"github.com/fleetdb/fleetdb/test/localfleet"
)

// The PrimaryStandby fleet's own prefix, bridge and address ranges: apart
// from TestHubRunsCloudNativePGOnRealNodes's, TestRealNodeRunsPodsAndLeavesNothing's
// and `make run NODES=real`'s.
const (
	psPrefix     = "rdbps"
	psBridge     = "fdbrps0"
	psNodeNet    = "10.236"
	psPodNet     = "10.237"
	psServiceNet = "10.238"
)

// peerNamespace is the namespace, in every other member, of the Services
// through which that member reaches member m's primaries (the platform
// team's cross-cluster service names, see replicationPath).
func peerNamespace(m string) string { return "peer-" + m }

// replicationNodePort is the NodePort at which member-N exposes the primary of the test's Database.
func replicationNodePort(n int) int { return 30540 + n }

// psFleet is the real-node fleet of TestPrimaryStandbyOnRealNodes.
type psFleet struct {
	t       *testing.T
	f       *e2e.Fleet
	lf      *localfleet.Fleet
	work    string
	binary  string
	hub     *localfleet.HubProcess
	hubRuns int
	key     types.NamespacedName
	image   string
	user    string
	// stopped and frozen members, and faults, put back by the cleanup.
	mu      sync.Mutex
	stopped map[string]bool
	frozen  map[string]localfleet.Undo
}

// TestPrimaryStandbyOnRealNodes runs a PrimaryStandby Database across two
// real-node members (one instance each: a primary in one member, a replica
// cluster in the other) through the hub binary and the real CloudNativePG
// operator, and proves each step with SQL (psql in the instance pods, run
// through each member's API `exec`):
//
//  1. rows written on the primary are read on the standby in the other
//     member, which streams over the cross-member path of
//     MemberCluster.spec.replication with sslmode verify-full on the
//     hub-issued certificates (pg_stat_wal_receiver on the standby,
//     pg_stat_ssl and pg_stat_replication on the primary);
//     1b. the link between the members cut, then lossy, then the standby's
//     pod killed: no commit acknowledged while the standby cannot have it,
//     every acknowledged one on the standby (linkFaults);
//  2. a planned switchover through the hub while a writer inserts rows: every
//     committed id is on the new primary, which takes writes, and the old
//     primary is in recovery and replays a row written after it;
//  3. the hub SIGKILLed in the switchover back (at WaitDemotion) and started
//     again: the switchover finishes, and no sample of pg_is_in_recovery on
//     both members (taken through steps 2 and 3) found two writable members;
//     3b. a forced failover while the primary member's operator cannot read
//     its instance: the hub waits at Fence until it can, never two writable
//     members, every acknowledged id on the new primary
//     (failoverWithBlindOperator);
//  4. the primary member (member-2 by then) lost (its node frozen, its
//     control plane stopped): the standby promoted by spec.topology.failover
//     takes writes; the old primary, back, does not.
//
// Every object fleetdb writes must pass CloudNativePG's webhooks (a refusal
// fails the test with the webhook's message).
func TestPrimaryStandbyOnRealNodes(t *testing.T) {
	requireRealNodes(t)
	p := startPSFleet(t)
	ctx := t.Context()
	members := p.f.MemberNames()
	a, b := members[0], members[1]

	ok := t.Run("RowsOnTheStandbyOverVerifyFull", func(t *testing.T) { p.rowsOnStandby(ctx, t, a, b) })
	if ok {
		ok = t.Run("LinkFaultsLoseNoAcknowledgedCommit", func(t *testing.T) { p.linkFaults(ctx, t, a, b) })
	}
	var samples *sampler
	if ok {
		samples = p.startSampler(ctx, members)
		ok = t.Run("SwitchoverKeepsEveryCommittedRow", func(t *testing.T) { p.switchover(ctx, t, a, b, false) })
	}
	if ok {
		ok = t.Run("HubKilledDuringSwitchover", func(t *testing.T) {
			p.switchover(ctx, t, b, a, true)
			samples.stopAndCheck(t)
		})
	}
	if ok {
		ok = t.Run("ForcedFailoverWaitsWhileTheOperatorCannotReadThePrimary", func(t *testing.T) { p.failoverWithBlindOperator(ctx, t, a, b) })
	}
	if ok {
		t.Run("ForcedFailoverFromAFrozenPrimary", func(t *testing.T) { p.failover(ctx, t, b, a) })
	}
}

func startPSFleet(t *testing.T) *psFleet {
	ctx := t.Context()
	p := &psFleet{t: t, stopped: map[string]bool{}, frozen: map[string]localfleet.Undo{}}
	r := startRealFleet(ctx, t, realNet{prefix: psPrefix, bridge: psBridge, nodeNet: psNodeNet, podNet: psPodNet, serviceNet: psServiceNet}, func() {
		p.mu.Lock()
		for _, undo := range p.frozen {
			_ = undo(context.Background())
		}
		p.mu.Unlock()
	})
	p.f, p.lf, p.work, p.binary, p.image = r.f, r.lf, r.work, r.hubBinary, r.pgImage
	pgVersion := r.pgVersion
	p.startHub(ctx, t)
	t.Cleanup(func() {
		p.hub.Stop()
		if t.Failed() {
			t.Logf("hub log:\n%s", localfleet.TailFile(p.hub.LogPath, 64<<10))
		}
	})

	ns := e2e.CreateNamespace(ctx, e2e.CreateNamespaceInput{T: t, Fleet: p.f, Prefix: "realps"})
	e2e.DumpOnFailure(t, p.f, ns)
	members := p.f.MemberNames()
	p.key = types.NamespacedName{Namespace: ns, Name: "orders"}
	p.replicationPath(ctx, t, members)

	db := e2e.NewDatabase(ns, p.key.Name, 1, members)
	db.Spec.Version = pgVersion
	db.Spec.Backend = fleetv1alpha1.BackendCloudNativePG
	db.Spec.Topology = &fleetv1alpha1.TopologySpec{
		Mode: fleetv1alpha1.TopologyPrimaryStandby, PrimaryCluster: members[0],
		StepTimeout: &metav1.Duration{Duration: 5 * time.Minute},
	}
	created := time.Now()
	if err := p.f.Hub.Client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	watchRefusals(ctx, t, p.f, p.key)
	p.nodePorts(ctx, t, members)
	p.waitStable(ctx, t, members[0])
	t.Logf("PrimaryStandby Database (%s primary, %s standby, 1 instance each) TopologyStable through the hub %s after it was created",
		members[0], members[1], time.Since(created).Round(time.Second))
	k := kubectl(ctx, t, p.f.Kubectl, p.f.Member(members[0]).Kubeconfig)
	p.user = strings.TrimSpace(k(time.Minute, "", "-n", ns, "get", "secret", p.key.Name+"-credentials",
		"-o", "go-template={{.data.username | base64decode}}"))
	return p
}

func (p *psFleet) startHub(ctx context.Context, t *testing.T) {
	p.hubRuns++
	hub, err := localfleet.StartHub(localfleet.HubOptions{
		Binary: p.binary, Kubeconfig: p.lf.HubIdentityKubeconfig,
		LogPath: filepath.Join(p.work, fmt.Sprintf("hub-%d.log", p.hubRuns)),
	})
	if err != nil {
		t.Fatal(err)
	}
	p.hub = hub
	if err := hub.WaitReady(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// replicationPath builds the cross-member path the way a platform team
// would on this fleet, where pod and node addresses are routed between
// members and Service addresses are not (docs/realnodes.md):
//
//   - in member M, a NodePort Service (nodePorts) exposes the Database's
//     primary (CloudNativePG's cnpg.io/instanceRole=primary label, the -rw
//     Service's selector) on M's node address;
//   - in every other member, a Service without selector in the namespace
//     peer-M, named <database>-<namespace>, whose EndpointSlice is M's node
//     address and that NodePort: a cross-cluster service name that cluster
//     DNS resolves there;
//   - MemberCluster M's spec.replication.hostTemplate is that name,
//     "$(DATABASE)-$(NAMESPACE).peer-M.svc.cluster.local", port 5432.
//
// The hub puts that name in M's server certificate; a standby verifies it
// (sslmode verify-full).
func (p *psFleet) replicationPath(ctx context.Context, t *testing.T, members []string) {
	svc := p.key.Name + "-" + p.key.Namespace
	for _, m := range members {
		mc := &fleetv1alpha1.MemberCluster{}
		if err := p.f.Hub.Client.Get(ctx, client.ObjectKey{Name: m}, mc); err != nil {
			t.Fatal(err)
		}
		mc.Spec.Replication = &fleetv1alpha1.ReplicationEndpoint{
			HostTemplate: "$(DATABASE)-$(NAMESPACE)." + peerNamespace(m) + ".svc.cluster.local",
			Port:         5432,
		}
		if err := p.f.Hub.Client.Update(ctx, mc); err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimPrefix(m, "member-"))
		if err != nil {
			t.Fatalf("member %s: not member-N", m)
		}
		nodeIP := fmt.Sprintf("%s.0.%d", psNodeNet, 10+n)
		for _, other := range members {
			if other == m {
				continue
			}
			k := kubectl(ctx, t, p.f.Kubectl, p.f.Member(other).Kubeconfig)
			k(time.Minute, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Service
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  ports: [{name: postgres, port: 5432, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[2]s
  namespace: %[1]s
  labels: {kubernetes.io/service-name: %[2]s}
addressType: IPv4
ports: [{name: postgres, port: %[4]d, protocol: TCP}]
endpoints: [{addresses: ["%[3]s"]}]
`, peerNamespace(m), svc, nodeIP, replicationNodePort(n)), "apply", "-f", "-")
		}
	}
}

// nodePorts exposes the Database's primary in each member on its node
// address, once fleetdb created the Database's namespace there (the standby
// retries its clone until the path is there).
func (p *psFleet) nodePorts(ctx context.Context, t *testing.T, members []string) {
	for _, m := range members {
		n, _ := strconv.Atoi(strings.TrimPrefix(m, "member-"))
		k := kubectl(ctx, t, p.f.Kubectl, p.f.Member(m).Kubeconfig)
		for deadline := time.Now().Add(5 * time.Minute); ; {
			if out := kTry(ctx, p.f.Kubectl, p.f.Member(m).Kubeconfig, "get", "namespace", p.key.Namespace, "-o", "name"); strings.HasPrefix(out, "namespace/") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: fleetdb did not create the namespace %s", m, p.key.Namespace)
			}
			time.Sleep(time.Second)
		}
		k(time.Minute, fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %[2]s-replication, namespace: %[1]s}
spec:
  type: NodePort
  selector: {cnpg.io/cluster: %[2]s, cnpg.io/instanceRole: primary}
  ports: [{name: postgres, port: 5432, targetPort: 5432, nodePort: %[3]d, protocol: TCP}]
`, p.key.Namespace, p.key.Name, replicationNodePort(n)), "apply", "-f", "-")
	}
}

// waitStable waits until the Database is TopologyStable with primary its
// primary and every member's Cluster following it.
func (p *psFleet) waitStable(ctx context.Context, t *testing.T, primary string) *fleetv1alpha1.Database {
	t.Helper()
	var db *fleetv1alpha1.Database
	var last string
	for deadline := time.Now().Add(p.f.Intervals.Ready); ; {
		db = &fleetv1alpha1.Database{}
		err := p.f.Hub.Client.Get(ctx, p.key, db)
		if err == nil {
			c := e2e.Condition(db.Status.Conditions, fleetv1alpha1.ConditionTopologyStable)
			last = fmt.Sprintf("TopologyStable %s %s: %s", c.Status, c.Reason, c.Message)
			if c.Status == metav1.ConditionTrue && db.Status.Topology != nil && db.Status.Topology.PrimaryCluster == primary &&
				db.Status.Topology.Switchover == nil && p.allFollow(ctx, primary) {
				return db
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Database did not become TopologyStable with %s primary: %s", primary, last)
		}
		time.Sleep(2 * time.Second)
	}
}

func (p *psFleet) allFollow(ctx context.Context, primary string) bool {
	for _, m := range p.f.Members {
		u := member.NewCNPGCluster()
		if err := m.Client.Get(ctx, p.key, u); err != nil {
			return false
		}
		if got, _, _ := unstructured.NestedString(u.Object, "spec", "replica", "primary"); got != primary {
			return false
		}
	}
	return true
}

// instance is the name of the Database's (only) instance pod in member m.
func (p *psFleet) instance(ctx context.Context, m string) string {
	out := kTry(ctx, p.f.Kubectl, p.f.Member(m).Kubeconfig, "-n", p.key.Namespace, "get", "pods",
		"-l", "cnpg.io/cluster="+p.key.Name+",cnpg.io/podRole=instance", "-o", "jsonpath={.items[*].metadata.name}")
	if strings.HasPrefix(out, "error:") {
		return ""
	}
	names := strings.Fields(out)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// sql runs psql as the postgres user over the instance's socket in member
// m (the member API's exec), with a minute's deadline (sqlWithin), and
// returns its output, or an error.
func (p *psFleet) sql(ctx context.Context, m, query string) (string, error) {
	return p.sqlWithin(ctx, m, query, time.Minute)
}

// sqlWithin runs psql as the postgres user over the instance's socket in
// member m (the member API's exec) with a deadline: the client (kubectl
// exec, and psql with it) is ended at d, as an application that gives up;
// nothing cancels the statement inside PostgreSQL (a cancel during a synchronous
// commit's wait would report the commit as done: "canceling the wait for
// synchronous replication", the transaction committed locally).
func (p *psFleet) sqlWithin(ctx context.Context, m, query string, d time.Duration) (string, error) {
	pod := p.instance(ctx, m)
	if pod == "" {
		return "", fmt.Errorf("%s: no instance pod", m)
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	out, err := exec.CommandContext(ctx, p.f.Kubectl, "--kubeconfig", p.f.Member(m).Kubeconfig, "-n", p.key.Namespace,
		"exec", pod, "-c", "postgres", "--", "psql", "-v", "ON_ERROR_STOP=1", "-XAtc", query, p.user).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s/%s: %w: %s", m, pod, err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// sqlEventually retries a query until its output satisfies ok.
func (p *psFleet) sqlEventually(ctx context.Context, t *testing.T, m, query string, within time.Duration, ok func(string) bool) string {
	t.Helper()
	var out string
	var err error
	for deadline := time.Now().Add(within); ; {
		out, err = p.sql(ctx, m, query)
		if err == nil && ok(out) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q: got %q (%v)", m, query, out, err)
		}
		time.Sleep(2 * time.Second)
	}
}

// Step 1.
func (p *psFleet) rowsOnStandby(ctx context.Context, t *testing.T, primary, standby string) {
	start := time.Now()
	rows := fmt.Sprintf("r%d", time.Now().UnixNano()%100000)
	out := p.sqlEventually(ctx, t, primary, "create table if not exists t(x text); create table if not exists w(id int primary key, at text);"+
		" insert into t values ('"+rows+"'), ('b'); select pg_is_in_recovery()::text || ' ' || string_agg(x, ',' order by x) from t", time.Minute,
		func(s string) bool { return strings.HasSuffix(s, "false b,"+rows) })
	t.Logf("%s (primary): %s", primary, out)
	out = p.sqlEventually(ctx, t, standby, "select pg_is_in_recovery()::text || ' ' || coalesce((select string_agg(x, ',' order by x) from t), '')",
		3*time.Minute, func(s string) bool { return s == "true b,"+rows })
	t.Logf("%s (standby, other member): %s", standby, out)

	// How the standby streams: from the primary's replication host (the
	// cross-member path), with sslmode verify-full.
	host := p.key.Name + "-" + p.key.Namespace + "." + peerNamespace(primary) + ".svc.cluster.local"
	out = p.sqlEventually(ctx, t, standby, "select status || ' ' || conninfo from pg_stat_wal_receiver", time.Minute,
		func(s string) bool { return strings.HasPrefix(s, "streaming ") })
	t.Logf("%s pg_stat_wal_receiver: %s", standby, out)
	for _, want := range []string{"host=" + host, "port=5432", "sslmode=verify-full", "user=streaming_replica", "sslrootcert="} {
		if !strings.Contains(out, want) {
			t.Errorf("%s streams with %q, which lacks %q", standby, out, want)
		}
	}
	// On the primary: the standby's connection is TLS, authenticated by
	// the hub-issued client certificate.
	out = p.sqlEventually(ctx, t, primary, "select r.usename || ' ' || r.state || ' ssl=' || s.ssl || ' ' || s.version || ' ' || coalesce(s.client_dn, '')"+
		" from pg_stat_replication r join pg_stat_ssl s using (pid)", time.Minute,
		func(s string) bool { return strings.Contains(s, "streaming") })
	t.Logf("%s pg_stat_replication/pg_stat_ssl: %s", primary, out)
	if !strings.Contains(out, "streaming_replica streaming ssl=true TLSv1.3 /CN=streaming_replica") {
		t.Errorf("%s: the standby's connection is not TLS with the hub's client certificate: %q", primary, out)
	}
	// Durability Synchronous (the default): the primary's commits wait for
	// the other member's standby, which it knows by the application_name
	// the hub gave it; the row above was committed only once it had it.
	out = p.sqlEventually(ctx, t, primary, "select current_setting('synchronous_standby_names') || ' / ' || "+
		"coalesce((select string_agg(application_name || ' ' || sync_state, ',') from pg_stat_replication), '')", time.Minute,
		func(s string) bool { return strings.Contains(s, member.StandbyApplicationName(standby)+" quorum") })
	t.Logf("%s synchronous_standby_names / pg_stat_replication: %s", primary, out)
	if want := `ANY 1 ("` + member.StandbyApplicationName(standby) + `")`; !strings.HasPrefix(out, want+" / ") {
		t.Errorf("%s: synchronous_standby_names is not %s: %q", primary, want, out)
	}
	// spec.topology.link's defaults reached PostgreSQL on both members (not
	// CloudNativePG's in-cluster 5s): the timeouts of the cross-member link.
	for _, m := range []string{primary, standby} {
		out = p.sqlEventually(ctx, t, m, "select current_setting('wal_sender_timeout') || ' ' || current_setting('wal_receiver_timeout')",
			time.Minute, func(s string) bool { return s == "30s 30s" })
		t.Logf("%s wal_sender_timeout wal_receiver_timeout: %s", m, out)
	}
	t.Logf("step 1 took %s", time.Since(start).Round(time.Second))
}

// writer inserts ids into w on whichever member takes writes, until
// stopped, and records every id whose insert committed (psql exited 0).
type writer struct {
	stop      chan struct{}
	done      chan struct{}
	mu        sync.Mutex
	committed []int
	refused   int
}

func (p *psFleet) startWriter(ctx context.Context, base int, members []string) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		id := base
		for {
			select {
			case <-w.stop:
				return
			case <-ctx.Done():
				return
			default:
			}
			id++
			ok := false
			for _, m := range members {
				if out, err := p.sql(ctx, m, fmt.Sprintf("insert into w values (%d, '%s')", id, m)); err == nil && out == "INSERT 0 1" {
					ok = true
					break
				}
			}
			w.mu.Lock()
			if ok {
				w.committed = append(w.committed, id)
			} else {
				w.refused++
			}
			w.mu.Unlock()
			if !ok {
				time.Sleep(500 * time.Millisecond)
			}
		}
	}()
	return w
}

func (w *writer) finish() ([]int, int) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.committed), w.refused
}

// Steps 2 and 3: a switchover from -> to through the hub with a writer
// running; with killHub, the hub is SIGKILLed once the switchover reached
// WaitDemotion and started again.
func (p *psFleet) switchover(ctx context.Context, t *testing.T, from, to string, killHub bool) {
	start := time.Now()
	base := 1000
	if killHub {
		base = 2000
	}
	w := p.startWriter(ctx, base, []string{from, to})
	// Some rows before the switchover.
	for deadline := time.Now().Add(time.Minute); ; {
		w.mu.Lock()
		n := len(w.committed)
		w.mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			w.finish()
			t.Fatal("the writer committed fewer than 3 rows in a minute before the switchover")
		}
		time.Sleep(time.Second)
	}
	e2e.UpdateDatabase(ctx, t, p.f, p.key, func(d *fleetv1alpha1.Database) { d.Spec.Topology.PrimaryCluster = to })
	t.Logf("switchover %s -> %s requested", from, to)
	if killHub {
		// The first step seen once the demotion was requested (polled: a
		// fast step may pass between two reads).
		afterDemotion := []fleetv1alpha1.SwitchoverStep{fleetv1alpha1.StepWaitDemotion, fleetv1alpha1.StepPromote,
			fleetv1alpha1.StepWaitPromotion, fleetv1alpha1.StepRepoint}
		var step fleetv1alpha1.SwitchoverStep
		for deadline := time.Now().Add(5 * time.Minute); ; {
			db := &fleetv1alpha1.Database{}
			if err := p.f.Hub.Client.Get(ctx, p.key, db); err == nil && db.Status.Topology != nil && db.Status.Topology.Switchover != nil &&
				slices.Contains(afterDemotion, db.Status.Topology.Switchover.Step) {
				step = db.Status.Topology.Switchover.Step
				break
			}
			if time.Now().After(deadline) {
				w.finish()
				t.Fatal("the switchover did not reach WaitDemotion")
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err := p.hub.Kill(); err != nil {
			t.Fatal(err)
		}
		t.Logf("hub SIGKILLed at step %s", step)
		time.Sleep(5 * time.Second)
		p.startHub(ctx, t)
		t.Logf("hub started again")
	}
	db := p.waitStable(ctx, t, to)
	last := db.Status.Topology.LastSwitchover
	if last == nil || last.Outcome != "Succeeded" || last.From != from || last.To != to {
		w.finish()
		t.Fatalf("lastSwitchover: %+v", last)
	}
	t.Logf("switchover %s -> %s Succeeded through the hub (%s after the request)", from, to, time.Since(start).Round(time.Second))
	// The writer goes on until the new primary took some of its rows.
	for deadline := time.Now().Add(2 * time.Minute); ; {
		out, err := p.sql(ctx, to, fmt.Sprintf("select count(*) from w where id > %d and at = '%s'", base, to))
		if n, _ := strconv.Atoi(out); err == nil && n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			w.finish()
			t.Fatalf("%s took no rows from the writer after the switchover: %q %v", to, out, err)
		}
		time.Sleep(time.Second)
	}
	committed, refused := w.finish()
	// Every committed id is on the new primary.
	// Read with retries: CloudNativePG restarts a promoted primary once
	// (archive_mode "always" to "on"; see failover).
	out := p.sqlEventually(ctx, t, to, fmt.Sprintf("select coalesce(string_agg(id::text, ',' order by id), '') from w where id > %d and id < %d", base, base+1000),
		time.Minute, func(string) bool { return true })
	have := map[int]bool{}
	for _, s := range strings.Split(out, ",") {
		if n, err := strconv.Atoi(s); err == nil {
			have[n] = true
		}
	}
	var lost []int
	for _, id := range committed {
		if !have[id] {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("committed ids missing on the new primary %s: %v (of %d committed)", to, lost, len(committed))
	}
	t.Logf("writer: %d ids committed (%d inserts refused while no member took writes), every one on the new primary %s",
		len(committed), refused, to)
	// The new primary takes writes; the old primary is in recovery and
	// replays them.
	mark := fmt.Sprintf("after-%s-%d", to, time.Now().UnixNano()%100000)
	p.sqlEventually(ctx, t, to, "insert into t select '"+mark+"' where not exists (select 1 from t where x = '"+mark+"'); select count(*) from t where x = '"+mark+"'",
		time.Minute, func(s string) bool { return strings.HasSuffix(s, "\n1") })
	out = p.sqlEventually(ctx, t, from, "select pg_is_in_recovery()::text || ' ' || count(*) from t where x = '"+mark+"'", 3*time.Minute,
		func(s string) bool { return s == "true 1" })
	t.Logf("%s (old primary): in recovery, replays the row written on %s after the switchover: %s", from, to, out)
	rec := p.sqlEventually(ctx, t, from, "select status || ' ' || conninfo from pg_stat_wal_receiver", time.Minute,
		func(s string) bool { return strings.HasPrefix(s, "streaming ") })
	if want := "host=" + p.key.Name + "-" + p.key.Namespace + "." + peerNamespace(to) + ".svc.cluster.local"; !strings.Contains(rec, want) ||
		!strings.Contains(rec, "sslmode=verify-full") {
		t.Errorf("%s does not stream from %s with verify-full: %q", from, want, rec)
	}
	t.Logf("step took %s", time.Since(start).Round(time.Second))
}

// sampler reads pg_is_in_recovery on every member, over and over, and
// records the samples in which more than one member was writable.
type sampler struct {
	stop    chan struct{}
	done    chan struct{}
	samples int
	both    []string
}

func (p *psFleet) startSampler(ctx context.Context, members []string) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			default:
			}
			var writable []string
			for _, m := range members {
				if out, err := p.sql(ctx, m, "select pg_is_in_recovery()"); err == nil && out == "f" {
					writable = append(writable, m)
				}
			}
			s.samples++
			if len(writable) > 1 {
				s.both = append(s.both, time.Now().Format(time.RFC3339Nano)+" "+strings.Join(writable, ","))
			}
		}
	}()
	return s
}

func (s *sampler) stopAndCheck(t *testing.T) {
	close(s.stop)
	<-s.done
	if len(s.both) > 0 {
		t.Errorf("two members writable at %d of %d samples: %v", len(s.both), s.samples, s.both)
	}
	t.Logf("sampler: %d samples of pg_is_in_recovery on both members through both switchovers, never two writable", s.samples)
}

// Step 4: the primary member lost (its node frozen, its control plane
// stopped), the standby promoted by a forced failover through the hub.
func (p *psFleet) failover(ctx context.Context, t *testing.T, lost, next string) {
	start := time.Now()
	mark := fmt.Sprintf("before-loss-%d", time.Now().UnixNano()%100000)
	if out, err := p.sql(ctx, lost, "insert into t values ('"+mark+"')"); err != nil || out != "INSERT 0 1" {
		t.Fatalf("%s did not take a write: %q %v", lost, out, err)
	}
	p.sqlEventually(ctx, t, next, "select count(*) from t where x = '"+mark+"'", 2*time.Minute, func(s string) bool { return s == "1" })

	thaw, err := p.lf.FreezeNode(lost)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.frozen[lost] = thaw
	p.mu.Unlock()
	t.Logf("%s's node frozen (kubelet, containerd, postgres)", lost)
	if err := p.lf.StopMember(ctx, lost); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.stopped[lost] = true
	p.mu.Unlock()
	t.Logf("%s's control plane stopped: the member is lost", lost)

	e2e.UpdateDatabase(ctx, t, p.f, p.key, func(d *fleetv1alpha1.Database) {
		d.Spec.Topology.PrimaryCluster = next
		d.Spec.Topology.Failover = &fleetv1alpha1.FailoverSpec{TargetCluster: next, Reason: "realdb: " + lost + " lost"}
	})
	for deadline := time.Now().Add(p.f.Intervals.Ready); ; {
		db := &fleetv1alpha1.Database{}
		err := p.f.Hub.Client.Get(ctx, p.key, db)
		if err == nil && db.Status.Topology != nil && db.Status.Topology.PrimaryCluster == next && db.Status.Topology.Switchover == nil &&
			slices.Contains(db.Status.Topology.Fenced, lost) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the forced failover to %s did not finish: %+v %v", next, db.Status.Topology, err)
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("forced failover to %s done through the hub, %s fenced (%s after the loss)", next, lost, time.Since(start).Round(time.Second))
	w := fmt.Sprintf("after-failover-%d", time.Now().UnixNano()%100000)
	out := p.sqlEventually(ctx, t, next, "insert into t values ('"+w+"'); select pg_is_in_recovery()::text || ' ' || count(*) from t where x in ('"+mark+"', '"+w+"')",
		2*time.Minute, func(s string) bool { return strings.HasSuffix(s, "false 2") })
	t.Logf("%s (new primary) takes writes: %s", next, out)
	// Its commits no longer wait for the fenced old primary. CloudNativePG
	// restarts a promoted replica cluster's primary once, as a promotion
	// turns archive_mode from "always" to "on", a restart-only parameter
	// (pkg/postgres/configuration.go, processConfigReloadAndManageRestart in
	// internal/management/controller/instance_controller.go, v1.30.0): the
	// queries retry through it, and the rows acknowledged before it are read
	// back after it.
	started := p.sqlEventually(ctx, t, next, "select pg_postmaster_start_time()", time.Minute, func(string) bool { return true })
	p.sqlEventually(ctx, t, next, "select current_setting('synchronous_standby_names') = ''", 2*time.Minute, func(s string) bool { return s == "t" })

	// Back: its control plane and its node together (CloudNativePG's
	// webhook runs on the node: the member takes no write to a Cluster
	// while the node is frozen). Until the hub's write of the standby spec
	// reaches its CloudNativePG, which demotes it, the old primary's
	// PostgreSQL runs on as it was; the samples say for how long.
	if err := p.lf.StartMember(ctx, lost); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	delete(p.stopped, lost)
	p.mu.Unlock()
	if err := thaw(ctx); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	delete(p.frozen, lost)
	p.mu.Unlock()
	back := time.Now()
	t.Logf("%s back: control plane started, node thawed", lost)
	// Until CloudNativePG there demotes it, the old primary's PostgreSQL
	// runs on as it was: it answers pg_is_in_recovery() = false and takes
	// statements. With durability Synchronous it acknowledges no commit:
	// each one waits for a standby in another member, and none follows it
	// any more. A writer tries a new row every second until the demotion;
	// every attempt must end without an acknowledgement.
	type attempt struct {
		at  time.Duration
		out string
		err error
	}
	var (
		attemptsMu sync.Mutex
		attempts   []attempt
		writers    sync.WaitGroup
		writable   []string
	)
	for i, deadline := 0, time.Now().Add(5*time.Minute); ; i++ {
		writers.Add(1)
		go func(at time.Duration) {
			defer writers.Done()
			out, err := p.sql(ctx, lost, fmt.Sprintf("insert into t values ('split-brain-%d')", i))
			attemptsMu.Lock()
			attempts = append(attempts, attempt{at: at, out: out, err: err})
			attemptsMu.Unlock()
		}(time.Since(back).Round(time.Second))
		out, err := p.sql(ctx, lost, "select pg_is_in_recovery()")
		if err == nil && out == "t" {
			break
		}
		if err == nil && out == "f" {
			writable = append(writable, time.Since(back).Round(time.Second).String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old primary %s is not in recovery 5 minutes after it was back: %q %v", lost, out, err)
		}
		time.Sleep(time.Second)
	}
	t.Logf("%s in recovery %s after it was back; samples that found it still a primary before its demotion, at: %v",
		lost, time.Since(back).Round(time.Second), writable)
	writers.Wait()
	for _, a := range attempts {
		if a.err == nil {
			t.Errorf("the old primary %s acknowledged a write %s after it was back: %q", lost, a.at, a.out)
			continue
		}
		msg := a.err.Error()
		if len(msg) > 300 {
			msg = msg[:300] + "..."
		}
		t.Logf("write on %s at %s not acknowledged: %s", lost, a.at, msg)
	}
	u := member.NewCNPGCluster()
	if err := p.f.Member(lost).Client.Get(ctx, p.key, u); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(u.Object, "spec", "replica", "primary"); got != next {
		t.Errorf("%s's Cluster follows %q, not %s", lost, got, next)
	}
	// The old primary, back, does not take writes.
	if out, err := p.sql(ctx, lost, "insert into t values ('split-brain')"); err == nil {
		t.Errorf("the old primary %s took a write after it was back: %q", lost, out)
	} else {
		t.Logf("%s refuses writes: %v", lost, err)
	}
	if out, err := p.sql(ctx, next, "select count(*) from t where x like 'split-brain%'"); err != nil || out != "0" {
		t.Errorf("%s: %q %v", next, out, err)
	}
	db := &fleetv1alpha1.Database{}
	if err := p.f.Hub.Client.Get(ctx, p.key, db); err == nil {
		c := e2e.Condition(db.Status.Conditions, fleetv1alpha1.ConditionTopologyStable)
		t.Logf("TopologyStable %s %s: %s; fenced %v", c.Status, c.Reason, c.Message, db.Status.Topology.Fenced)
	}
	// The rows the new primary acknowledged are there, after any restart.
	out = p.sqlEventually(ctx, t, next, "select pg_postmaster_start_time()::text || ' ' || count(*) from t where x in ('"+mark+"', '"+w+"')",
		time.Minute, func(string) bool { return true })
	if !strings.HasSuffix(out, " 2") {
		t.Errorf("%s lost a row it acknowledged: %q", next, out)
	}
	if now := strings.TrimSuffix(out, " 2"); now != started {
		t.Logf("%s's PostgreSQL restarted after its promotion (started %s, now %s); its acknowledged rows are there", next, started, now)
	}
	t.Logf("step 4 took %s", time.Since(start).Round(time.Second))
}
