package realdb

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/e2e"
	"github.com/fleetdb/fleetdb/test/localfleet"
)

// Step 1b: faults between the members (test/localfleet's fault helpers, the
// way a user meets them), with the primary's commits synchronous to the
// standby member:
//   - the link cut both ways: the primary acknowledges no commit (each waits
//     for the standby: wait event SyncRep); once the link is back a commit is
//     acknowledged and read on the standby;
//   - the link dropping 30% of its packets: commits go on, and every
//     acknowledged one is on the standby;
//   - the standby's pod killed (SIGKILL to its processes, no API call): the
//     kubelet restarts it, it streams again, every commit acknowledged
//     meanwhile is on it.
func (p *psFleet) linkFaults(ctx context.Context, t *testing.T, primary, standby string) {
	start := time.Now()
	undo, err := p.lf.CutMembers(ctx, standby, primary, localfleet.Both)
	if err != nil {
		t.Fatal(err)
	}
	heal := p.faultCleanup(t, undo)
	cut := time.Now()
	var (
		mu    sync.Mutex
		acked []string
		wg    sync.WaitGroup
	)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := p.sqlWithin(ctx, primary, fmt.Sprintf("insert into t values ('cut-%d-%d')", i, cut.UnixNano()%100000), 25*time.Second)
			if err == nil {
				mu.Lock()
				acked = append(acked, out)
				mu.Unlock()
			}
		}()
	}
	waiting := p.sqlEventually(ctx, t, primary, "select count(*) from pg_stat_activity where wait_event = 'SyncRep'", time.Minute,
		func(s string) bool { return s != "0" })
	wg.Wait()
	if len(acked) > 0 {
		t.Errorf("%s acknowledged %d commit(s) while its synchronous standby member %s was cut off: %v", primary, len(acked), standby, acked)
	}
	t.Logf("link %s-%s cut: %s commit(s) waited for the standby (SyncRep), none acknowledged in 25s", primary, standby, waiting)
	if err := heal(ctx); err != nil {
		t.Fatal(err)
	}
	mark := fmt.Sprintf("after-cut-%d", time.Now().UnixNano()%100000)
	p.sqlEventually(ctx, t, primary, "insert into t select '"+mark+"' where not exists (select 1 from t where x = '"+mark+"'); select count(*) from t where x = '"+mark+"'",
		2*time.Minute, func(s string) bool { return strings.HasSuffix(s, "\n1") })
	p.sqlEventually(ctx, t, standby, "select count(*) from t where x = '"+mark+"'", 2*time.Minute, func(s string) bool { return s == "1" })
	t.Logf("link back: %s acknowledges commits again, read on %s (%s after the cut)", primary, standby, time.Since(cut).Round(time.Second))

	// A lossy link.
	undo, err = p.lf.DropBetweenMembers(ctx, standby, primary, 0.3)
	if err != nil {
		t.Fatal(err)
	}
	heal = p.faultCleanup(t, undo)
	w := p.startWriter(ctx, 5000, []string{primary})
	time.Sleep(20 * time.Second)
	committed, _ := w.finish()
	if err := heal(ctx); err != nil {
		t.Fatal(err)
	}
	if len(committed) == 0 {
		t.Errorf("%s acknowledged no commit through a link that drops 30%% of its packets", primary)
	}
	p.requireRows(ctx, t, standby, committed, "through a lossy link")

	// The standby's pod killed.
	pod := p.instance(ctx, standby)
	uid := strings.TrimSpace(kTry(ctx, p.f.Kubectl, p.f.Member(standby).Kubeconfig, "-n", p.key.Namespace, "get", "pod", pod, "-o", "jsonpath={.metadata.uid}"))
	w = p.startWriter(ctx, 6000, []string{primary})
	time.Sleep(3 * time.Second)
	n, err := p.lf.KillPod(standby, uid)
	if err != nil {
		w.finish()
		t.Fatal(err)
	}
	killed := time.Now()
	p.sqlEventually(ctx, t, standby, "select status from pg_stat_wal_receiver", 3*time.Minute, func(s string) bool { return s == "streaming" })
	time.Sleep(3 * time.Second)
	committed, _ = w.finish()
	p.requireRows(ctx, t, standby, committed, "while its pod was killed and restarted")
	t.Logf("%s's pod killed (%d processes): streaming again %s later", standby, n, time.Since(killed).Round(time.Second))
	t.Logf("step 1b took %s", time.Since(start).Round(time.Second))
}

// faultCleanup undoes a fault at most once: when the test calls the
// returned function, or in the test's cleanup if it did not get there.
func (p *psFleet) faultCleanup(t *testing.T, undo localfleet.Undo) localfleet.Undo {
	var once sync.Once
	heal := func(ctx context.Context) error {
		var err error
		once.Do(func() { err = undo(ctx) })
		return err
	}
	t.Cleanup(func() { _ = heal(context.Background()) })
	return heal
}

// requireRows checks that every id in ids is in table w on member m, once
// m has replayed them (a standby catching up).
func (p *psFleet) requireRows(ctx context.Context, t *testing.T, m string, ids []int, when string) {
	t.Helper()
	if len(ids) == 0 {
		return
	}
	want := map[int]bool{}
	var list []string
	for _, id := range ids {
		want[id] = true
		list = append(list, strconv.Itoa(id))
	}
	query := "select count(*) from w where id in (" + strings.Join(list, ",") + ")"
	out, err := "", error(nil)
	for deadline := time.Now().Add(2 * time.Minute); ; {
		out, err = p.sql(ctx, m, query)
		if err == nil && out == strconv.Itoa(len(want)) {
			t.Logf("%s holds all %d ids acknowledged %s", m, len(want), when)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %q of the %d ids acknowledged %s (%v)", m, out, len(want), when, err)
		}
		time.Sleep(2 * time.Second)
	}
}

// podIP is the address of the first pod matching selector in member m's
// namespace ns.
func (p *psFleet) podIP(ctx context.Context, t *testing.T, m, ns, selector string) string {
	t.Helper()
	out := strings.TrimSpace(kTry(ctx, p.f.Kubectl, p.f.Member(m).Kubeconfig, "-n", ns, "get", "pods", "-l", selector,
		"-o", "jsonpath={.items[0].status.podIP}"))
	if out == "" || strings.HasPrefix(out, "error:") {
		t.Fatalf("%s: no pod %s in %s: %s", m, selector, ns, out)
	}
	return out
}

// Step 3b: a forced failover while the primary member's CloudNativePG
// operator cannot reach its instance (CutAddresses between the two pods, on
// the member's node): the instance runs on, its operator reports it with
// isPrimary false and timeline 0, and the hub must not read that as
// "demoted". The hub waits at Fence, naming the instance it cannot vouch
// for, and the standby is not promoted while the cut lasts; once the
// operator reads the instance again (demoted by its instance manager, which
// reaches the API server itself) the failover finishes. Throughout, no
// sample finds two writable members and every acknowledged id is on the new
// primary.
func (p *psFleet) failoverWithBlindOperator(ctx context.Context, t *testing.T, primary, next string) {
	start := time.Now()
	samples := p.startSampler(ctx, []string{primary, next})
	w := p.startWriter(ctx, 7000, []string{primary, next})
	operator := p.podIP(ctx, t, primary, "cnpg-system", "app.kubernetes.io/name=cloudnative-pg")
	instance := p.podIP(ctx, t, primary, p.key.Namespace, "cnpg.io/cluster="+p.key.Name+",cnpg.io/podRole=instance")
	undo, err := p.lf.CutAddresses(ctx, primary, operator, instance)
	if err != nil {
		w.finish()
		t.Fatal(err)
	}
	heal := p.faultCleanup(t, undo)
	t.Logf("%s: CloudNativePG's operator (%s) cut off from the instance (%s)", primary, operator, instance)
	e2e.UpdateDatabase(ctx, t, p.f, p.key, func(d *fleetv1alpha1.Database) {
		d.Spec.Topology.PrimaryCluster = next
		d.Spec.Topology.Failover = &fleetv1alpha1.FailoverSpec{TargetCluster: next, Reason: "realdb: " + primary + "'s operator cut off"}
	})
	// While the cut lasts: the hub waits at Fence and says why; the target
	// is not promoted.
	var said string
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		db := &fleetv1alpha1.Database{}
		if err := p.f.Hub.Client.Get(ctx, p.key, db); err != nil {
			continue
		}
		top := db.Status.Topology
		if top == nil || top.Switchover == nil {
			if top != nil && top.PrimaryCluster == next {
				w.finish()
				t.Fatalf("the hub promoted %s while %s's operator could not read its instance", next, primary)
			}
			continue
		}
		if top.Switchover.Step == fleetv1alpha1.StepPromote || top.Switchover.Step == fleetv1alpha1.StepDone {
			w.finish()
			t.Fatalf("the failover reached %s while %s's operator could not read its instance: %s", top.Switchover.Step, primary, top.Switchover.Message)
		}
		if strings.Contains(top.Switchover.Message, "could not read instance") {
			said = top.Switchover.Message
			if time.Since(start) > 30*time.Second {
				break
			}
		}
	}
	if said == "" {
		w.finish()
		t.Fatalf("the hub never said it waits for a report of %s's instance, which its operator cannot read", primary)
	}
	if out, err := p.sql(ctx, next, "select pg_is_in_recovery()"); err != nil || out != "t" {
		t.Errorf("%s, the failover's target, is not in recovery while the old primary is unproven: %q %v", next, out, err)
	}
	t.Logf("the hub waits at Fence: %q", said)
	if err := heal(ctx); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	for deadline := time.Now().Add(p.f.Intervals.Ready); ; time.Sleep(2 * time.Second) {
		db := &fleetv1alpha1.Database{}
		err := p.f.Hub.Client.Get(ctx, p.key, db)
		if err == nil && db.Status.Topology != nil && db.Status.Topology.PrimaryCluster == next && db.Status.Topology.Switchover == nil {
			break
		}
		if time.Now().After(deadline) {
			w.finish()
			t.Fatalf("the failover to %s did not finish after the cut healed: %+v %v", next, db.Status.Topology, err)
		}
	}
	t.Logf("cut healed: the failover to %s finished %s later", next, time.Since(healed).Round(time.Second))
	// The new primary takes writes.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		out, err := p.sql(ctx, next, "select count(*) from w where at = '"+next+"' and id > 7000 and id < 8000")
		if n, _ := strconv.Atoi(out); err == nil && n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			w.finish()
			t.Fatalf("%s took no writes after the failover: %q %v", next, out, err)
		}
	}
	committed, refused := w.finish()
	samples.stopAndCheck(t)
	p.requireRows(ctx, t, next, committed, "before, during and after the failover")
	t.Logf("writer: %d ids committed, %d inserts refused while no member took writes", len(committed), refused)
	// The old primary, demoted while the hub could see it, follows the new
	// one: once it reports the new timeline the hub releases it from the
	// fence (docs/cloudnativepg.md: a standby reports the timeline of its
	// last restartpoint; CHECKPOINT on a standby makes one now instead of at
	// checkpoint_timeout).
	p.sqlEventually(ctx, t, primary, "checkpoint", 2*time.Minute, func(string) bool { return true })
	p.waitStable(ctx, t, next)
	t.Logf("%s follows %s again, TopologyStable (%s after the cut healed)", primary, next, time.Since(healed).Round(time.Second))
	t.Logf("step 3b took %s", time.Since(start).Round(time.Second))
}
