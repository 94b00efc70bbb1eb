package realdb

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetdb/fleetdb/test/localfleet"
)

// sqlWithin is sql with its own deadline: the client (kubectl exec, and
// psql with it) is ended at d, as an application that gives up; nothing
// cancels the statement inside PostgreSQL (a cancel during a synchronous
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
	waiting := p.sqlEventually(ctx, t, primary, "select count(*) from pg_stat_activity where wait_event = 'SyncRep'", 20*time.Second,
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
