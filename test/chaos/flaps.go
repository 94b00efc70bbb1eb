package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// InvNoFlap is the invariant that a hub restart is invisible to users: a Database Ready on its
// generation stays Ready while the hub restarts, unless the cycle changed
// it or froze one of its members.
const InvNoFlap = "Ready kept across restarts"

// flapWatch watches the hub's Databases and records every Ready=True →
// not True transition on an unchanged generation.
type flapWatch struct {
	mu    sync.Mutex
	ready map[string]int64 // name -> generation it is Ready on
	flaps map[string]string
}

func newFlapWatch() *flapWatch {
	return &flapWatch{ready: map[string]int64{}, flaps: map[string]string{}}
}

// run watches until ctx ends, watching again when a watch closes.
func (w *flapWatch) run(ctx context.Context, c client.WithWatch) {
	for ctx.Err() == nil {
		wi, err := c.Watch(ctx, &fleetv1alpha1.DatabaseList{}, client.InNamespace(Namespace))
		if err != nil {
			_ = sleep(ctx, time.Second)
			continue
		}
		for ev := range wi.ResultChan() {
			db, ok := ev.Object.(*fleetv1alpha1.Database)
			if !ok {
				continue
			}
			w.observe(db, ev.Type == watch.Deleted)
		}
		wi.Stop()
	}
}

func (w *flapWatch) observe(db *fleetv1alpha1.Database, deleted bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := meta.FindStatusCondition(db.Status.Conditions, fleetv1alpha1.ConditionReady)
	readyNow := !deleted && c != nil && c.Status == "True" && c.ObservedGeneration == db.Generation
	gen, wasReady := w.ready[db.Name]
	switch {
	case readyNow:
		w.ready[db.Name] = db.Generation
	case wasReady:
		delete(w.ready, db.Name)
		if !deleted && db.DeletionTimestamp == nil && gen == db.Generation && w.flaps[db.Name] == "" {
			msg := "no Ready condition"
			if c != nil {
				msg = fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
			}
			var entries []string
			for _, c := range db.Status.Clusters {
				entries = append(entries, fmt.Sprintf("%s %s (%s)", c.Name, c.Phase, c.Message))
			}
			w.flaps[db.Name] = fmt.Sprintf("phase %s, %s; members: %s", db.Status.Phase, msg, strings.Join(entries, "; "))
		}
	}
}

// take returns and forgets the flaps recorded so far.
func (w *flapWatch) take() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.flaps
	w.flaps = map[string]string{}
	return out
}
