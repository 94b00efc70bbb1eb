package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// maxEvents is how many recent Events explain shows.
const maxEvents = 10

func newExplainCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "explain DATABASE",
		Short: "Why a Database is not Ready: failing conditions, members and their messages, Events",
		Long: `explain reads a Database (in -n's namespace) and says why it is not Ready: the
conditions that fail, each member's phase and message, placement problems (a
named member that is not registered, cordoned, draining, not Ready or not open
to the namespace), members the Database left behind, its recent Events, and
the trace id of the last change (its spans, when the hub exports traces, and the
hub's log lines of it, traceID=..., either way) and of the last switchover.`,
		Args: exactArgs(1, "the DATABASE name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return explain(cmd.Context(), o, args[0])
		},
	}
}

func explain(ctx context.Context, o *options, name string) error {
	c, err := o.hubClient()
	if err != nil {
		return err
	}
	ns, err := o.namespace()
	if err != nil {
		return err
	}
	var db fleetv1alpha1.Database
	var mcs fleetv1alpha1.MemberClusterList
	var nsObj corev1.Namespace
	err = o.call(ctx, func(ctx context.Context) error {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &db); err != nil {
			return err
		}
		if err := c.List(ctx, &mcs); err != nil {
			return err
		}
		return c.Get(ctx, types.NamespacedName{Name: ns}, &nsObj)
	})
	if err != nil {
		return fmt.Errorf("reading Database %s/%s: %w", ns, name, err)
	}
	events, err := recentEvents(ctx, o, c, &db)
	if err != nil {
		return err
	}
	// Messages and Events hold what others wrote (anyone who may create
	// Events in the namespace): no escape sequence of theirs reaches the terminal.
	w := escapingWriter{o.streams.Out}
	now := time.Now()
	if !explainSummary(w, &db) {
		explainConditions(w, &db)
	}
	explainMembers(w, &db, now)
	explainPlacement(w, &db, mcs.Items, nsObj.Labels)
	for _, l := range db.Status.LeftBehind {
		fmt.Fprintf(w, "Left behind in %s (since %s ago): %s\n", l.Cluster, age(l.Since.Time, now), l.Message)
	}
	explainEvents(w, events, now)
	explainTrace(w, &db)
	return nil
}

// explainSummary prints the first line and reports whether the Database is Ready.
func explainSummary(w io.Writer, db *fleetv1alpha1.Database) bool {
	ready := meta.FindStatusCondition(db.Status.Conditions, fleetv1alpha1.ConditionReady)
	key := db.Namespace + "/" + db.Name
	if ready != nil && ready.Status == metav1.ConditionTrue && db.Status.ObservedGeneration == db.Generation {
		fmt.Fprintf(w, "Database %s is Ready on generation %d: %s members ready.\n", key, db.Generation, db.Status.ReadySummary)
		return true
	}
	fmt.Fprintf(w, "Database %s is not Ready: phase %s, %s members ready, generation %d (observed %d).\n",
		key, dash(string(db.Status.Phase)), dash(db.Status.ReadySummary), db.Generation, db.Status.ObservedGeneration)
	return false
}

// failing is the order in which conditions explain a Database that is not
// Ready, and the status each has when it is the problem.
var failing = []struct {
	typ    string
	status metav1.ConditionStatus
}{
	{fleetv1alpha1.ConditionStalled, metav1.ConditionTrue},
	{fleetv1alpha1.ConditionPlaced, metav1.ConditionFalse},
	{fleetv1alpha1.ConditionDegraded, metav1.ConditionTrue},
	{fleetv1alpha1.ConditionTopologyStable, metav1.ConditionFalse},
	{fleetv1alpha1.ConditionReconciling, metav1.ConditionTrue},
	{fleetv1alpha1.ConditionDeleting, metav1.ConditionTrue},
	{fleetv1alpha1.ConditionCredentialsRotated, metav1.ConditionFalse},
	{fleetv1alpha1.ConditionReady, metav1.ConditionFalse},
}

func explainConditions(w io.Writer, db *fleetv1alpha1.Database) {
	var lines []string
	for _, f := range failing {
		c := meta.FindStatusCondition(db.Status.Conditions, f.typ)
		if c == nil || c.Status != f.status {
			continue
		}
		lines = append(lines, fmt.Sprintf("  %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	// Conditions fleetdb adds later (FinalBackup, Restored, ...) that are False.
	for _, c := range db.Status.Conditions {
		if c.Status == metav1.ConditionFalse && !slices.ContainsFunc(failing, func(f struct {
			typ    string
			status metav1.ConditionStatus
		}) bool {
			return f.typ == c.Type
		}) {
			lines = append(lines, fmt.Sprintf("  %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	if len(lines) == 0 {
		fmt.Fprintln(w, "Conditions: none failing yet (the hub has not reported on this generation)")
		return
	}
	fmt.Fprintln(w, "Failing conditions:")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

func explainMembers(w io.Writer, db *fleetv1alpha1.Database, now time.Time) {
	if len(db.Status.Clusters) == 0 {
		fmt.Fprintln(w, "Members: none placed.")
		return
	}
	fmt.Fprintln(w, "Members:")
	for _, c := range db.Status.Clusters {
		var synced time.Time
		if c.LastSyncTime != nil {
			synced = c.LastSyncTime.Time
		}
		line := fmt.Sprintf("  %s: %s, %d/%d replicas ready, generation %d/%d, last sync %s ago", c.Name, dash(string(c.Phase)),
			c.ReadyReplicas, c.Replicas, c.ObservedGeneration, db.Generation, age(synced, now))
		if c.Role != "" {
			line += ", role " + string(c.Role)
		}
		if c.Reason != "" {
			line += ", reason " + c.Reason
		}
		if c.Message != "" {
			line += ": " + c.Message
		}
		fmt.Fprintln(w, line)
	}
}

// explainPlacement names what keeps members named in spec.placement.clusterNames out.
func explainPlacement(w io.Writer, db *fleetv1alpha1.Database, members []fleetv1alpha1.MemberCluster, nsLabels map[string]string) {
	byName := map[string]*fleetv1alpha1.MemberCluster{}
	for i := range members {
		byName[members[i].Name] = &members[i]
	}
	allowed := map[string]bool{}
	for _, m := range admitted(members, nsLabels) {
		allowed[m.Name] = true
	}
	var lines []string
	for _, name := range db.Spec.Placement.ClusterNames {
		why := memberProblems(byName[name], name, db.Namespace, allowed[name])
		if len(why) > 0 {
			lines = append(lines, fmt.Sprintf("  %s: %s", name, strings.Join(why, "; ")))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, "Placement (spec.placement.clusterNames):")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// memberProblems says what keeps a named member from running a Database of namespace ns.
func memberProblems(m *fleetv1alpha1.MemberCluster, name, ns string, allowed bool) []string {
	if m == nil {
		return []string{"not registered (no MemberCluster " + name + ")"}
	}
	var why []string
	if !allowed {
		why = append(why, "its spec.namespaceSelector does not admit namespace "+ns)
	}
	if m.Spec.Drain {
		why = append(why, "draining")
	} else if m.Spec.Unschedulable {
		why = append(why, "cordoned (no new placements)")
	}
	if r := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.MemberConditionReady); r == nil || r.Status != metav1.ConditionTrue {
		why = append(why, "not Ready")
	}
	return why
}

// escapingWriter writes with terminal escape characters made visible
// (printers.EscapeTerminal). explain writes no colour of its own.
type escapingWriter struct{ w io.Writer }

func (e escapingWriter) Write(p []byte) (int, error) {
	if err := printers.WriteEscaped(e.w, string(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// recentEvents are the Database's Events, newest last.
func recentEvents(ctx context.Context, o *options, c client.Client, db *fleetv1alpha1.Database) ([]eventsv1.Event, error) {
	var list eventsv1.EventList
	sel := fields.OneTermEqualSelector("regarding.uid", string(db.UID))
	err := o.call(ctx, func(ctx context.Context) error {
		return c.List(ctx, &list, client.InNamespace(db.Namespace), client.MatchingFieldsSelector{Selector: sel})
	})
	if err != nil {
		return nil, fmt.Errorf("listing the Events of %s/%s: %w", db.Namespace, db.Name, err)
	}
	slices.SortStableFunc(list.Items, func(a, b eventsv1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	if len(list.Items) > maxEvents {
		list.Items = list.Items[len(list.Items)-maxEvents:]
	}
	return list.Items, nil
}

// eventTime is when an Event last happened.
func eventTime(e eventsv1.Event) time.Time {
	switch {
	case e.Series != nil:
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.DeprecatedLastTimestamp.IsZero():
		return e.DeprecatedLastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

func explainEvents(w io.Writer, events []eventsv1.Event, now time.Time) {
	if len(events) == 0 {
		fmt.Fprintln(w, "Events: none.")
		return
	}
	fmt.Fprintln(w, "Recent Events:")
	for _, e := range events {
		count := ""
		if e.Series != nil && e.Series.Count > 1 {
			count = fmt.Sprintf(" (x%d)", e.Series.Count)
		}
		fmt.Fprintf(w, "  %s ago  %s  %s%s: %s\n", age(eventTime(e), now), e.Type, e.Reason, count, e.Note)
	}
}

// explainTrace names the trace of the last change and of the last primary change.
func explainTrace(w io.Writer, db *fleetv1alpha1.Database) {
	if id := db.Status.LastChangeTraceID; id != "" {
		fmt.Fprintf(w, "Trace of the last change (generation %d): %s (in the hub's logs: traceID=%s)\n", db.Status.ObservedGeneration, id, id)
	}
	t := db.Status.Topology
	switch {
	case t != nil && t.Switchover != nil && t.Switchover.TraceID != "":
		fmt.Fprintf(w, "Trace of the switchover under way (%s -> %s): %s\n", t.Switchover.From, t.Switchover.To, t.Switchover.TraceID)
	case t != nil && t.LastSwitchover != nil && t.LastSwitchover.TraceID != "":
		fmt.Fprintf(w, "Trace of the last switchover (%s -> %s, %s): %s\n", t.LastSwitchover.From, t.LastSwitchover.To, t.LastSwitchover.Outcome, t.LastSwitchover.TraceID)
	}
}
