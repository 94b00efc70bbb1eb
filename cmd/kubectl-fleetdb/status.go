package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

type statusOptions struct {
	*options
	allNamespaces bool
	output        string
	watch         bool
}

func newStatusCommand(o *options) *cobra.Command {
	s := &statusOptions{options: o}
	cmd := &cobra.Command{
		Use:   "status [DATABASE] [-A] [-o json|yaml|wide] [--watch]",
		Short: "The fleet at a glance: members, and Databases on every member",
		Long: `status shows the members (reachability, Kubernetes version, cordon/drain, how many
of the listed Databases each runs, last probe) and the Databases of the namespace
(-n, or every namespace with -A) with, per member, its phase, ready/desired
replicas, the generation it runs against the Database's, and the last sync.
With DATABASE only that Database and its members. -o wide adds backends, roles,
endpoints and messages; -o json|yaml prints the MemberClusters and Databases as
a v1 List. --watch redraws on every change (Ctrl-C ends it). Colour only on a
terminal, never with NO_COLOR set.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("status takes at most one DATABASE")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return s.run(cmd.Context(), name)
		},
	}
	cmd.Flags().BoolVarP(&s.allNamespaces, "all-namespaces", "A", false, "Databases of every namespace")
	cmd.Flags().StringVarP(&s.output, "output", "o", "", "output format: json, yaml or wide")
	cmd.Flags().BoolVarP(&s.watch, "watch", "w", false, "redraw on every change")
	return cmd
}

// fleetView is what status shows.
type fleetView struct {
	members []fleetv1alpha1.MemberCluster
	dbs     []fleetv1alpha1.Database
	// allNamespaces: show the namespace column.
	allNamespaces bool
}

func (s *statusOptions) run(ctx context.Context, name string) error {
	switch s.output {
	case "", "wide", "json", "yaml":
	default:
		return usagef("-o %q: want json, yaml or wide", s.output)
	}
	if s.watch && (s.output == "json" || s.output == "yaml") {
		return usagef("--watch prints tables: use it without -o json|yaml")
	}
	if name != "" && s.allNamespaces {
		return usagef("a DATABASE is in one namespace: use -n, not -A")
	}
	c, err := s.hubClient()
	if err != nil {
		return err
	}
	ns := ""
	if !s.allNamespaces {
		if ns, err = s.namespace(); err != nil {
			return err
		}
	}
	if s.watch {
		return s.watchLoop(ctx, c, ns, name)
	}
	v, err := s.gather(ctx, c, ns, name)
	if err != nil {
		return err
	}
	if s.output == "json" || s.output == "yaml" {
		return printList(s.streams.Out, s.output, v)
	}
	v.render(s.streams.Out, s.output == "wide", s.colour(), time.Now())
	return nil
}

// gather reads the members and the Databases (of ns, "" for all; only name when given).
func (s *statusOptions) gather(ctx context.Context, c client.Client, ns, name string) (*fleetView, error) {
	v := &fleetView{allNamespaces: s.allNamespaces}
	var mcs fleetv1alpha1.MemberClusterList
	if err := s.call(ctx, func(ctx context.Context) error { return c.List(ctx, &mcs) }); err != nil {
		return nil, fmt.Errorf("listing MemberClusters: %w", err)
	}
	if name != "" {
		var db fleetv1alpha1.Database
		if err := s.call(ctx, func(ctx context.Context) error {
			return c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &db)
		}); err != nil {
			return nil, fmt.Errorf("reading Database %s/%s: %w", ns, name, err)
		}
		v.dbs = []fleetv1alpha1.Database{db}
		for _, m := range mcs.Items {
			if slices.ContainsFunc(db.Status.Clusters, func(c fleetv1alpha1.ClusterStatus) bool { return c.Name == m.Name }) ||
				slices.Contains(db.Spec.Placement.ClusterNames, m.Name) {
				v.members = append(v.members, m)
			}
		}
		return v, nil
	}
	v.members = mcs.Items
	var dbs fleetv1alpha1.DatabaseList
	if err := s.call(ctx, func(ctx context.Context) error { return c.List(ctx, &dbs, client.InNamespace(ns)) }); err != nil {
		return nil, fmt.Errorf("listing Databases: %w", err)
	}
	v.dbs = dbs.Items
	return v, nil
}

func (v *fleetView) render(w io.Writer, wide, colour bool, now time.Time) {
	v.memberTable(wide, now).render(w, colour)
	fmt.Fprintln(w)
	if len(v.dbs) == 0 {
		fmt.Fprintln(w, "No Databases.")
		return
	}
	v.databaseTable(wide, now).render(w, colour)
}

func (v *fleetView) memberTable(wide bool, now time.Time) *table {
	t := &table{header: []string{"MEMBER", "READY", "VERSION", "SCHEDULING", "DATABASES", "LAST PROBE"}}
	if wide {
		t.header = append(t.header, "BACKENDS", "MESSAGE")
	}
	for _, m := range v.members {
		ready := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.MemberConditionReady)
		readyCell, msg := cell{text: "Unknown", colour: yellow}, ""
		if ready != nil {
			readyCell, msg = conditionCell(ready), ready.Message
			if ready.Status == metav1.ConditionTrue {
				msg = ""
			}
		}
		sched := plain("Schedulable")
		switch {
		case m.Spec.Drain:
			sched = cell{text: "Draining", colour: yellow}
		case m.Spec.Unschedulable:
			sched = cell{text: "Cordoned", colour: yellow}
		}
		placed := 0
		for _, db := range v.dbs {
			if slices.ContainsFunc(db.Status.Clusters, func(c fleetv1alpha1.ClusterStatus) bool { return c.Name == m.Name }) {
				placed++
			}
		}
		var probe time.Time
		if m.Status.LastProbeTime != nil {
			probe = m.Status.LastProbeTime.Time
		}
		row := []cell{plain(m.Name), readyCell, plain(dash(m.Status.KubernetesVersion)), sched, plain(strconv.Itoa(placed)), plain(age(probe, now))}
		if wide {
			backends := make([]string, 0, len(m.Status.Backends))
			for _, b := range m.Status.Backends {
				backends = append(backends, string(b))
			}
			row = append(row, plain(dash(strings.Join(backends, ","))), plain(dash(msg)))
		}
		t.add(row...)
	}
	return t
}

// conditionCell is a condition's status, with its reason when not True.
func conditionCell(c *metav1.Condition) cell {
	switch c.Status {
	case metav1.ConditionTrue:
		return cell{text: "True", colour: green}
	case metav1.ConditionFalse:
		return cell{text: "False (" + c.Reason + ")", colour: red}
	}
	return cell{text: "Unknown (" + c.Reason + ")", colour: yellow}
}

func (v *fleetView) databaseTable(wide bool, now time.Time) *table {
	t := &table{header: []string{"DATABASE", "PHASE", "READY", "MEMBER", "STATE", "REPLICAS", "GENERATION", "LAST SYNC"}}
	if v.allNamespaces {
		t.header = append([]string{"NAMESPACE"}, t.header...)
	}
	if wide {
		t.header = append(t.header, "BACKEND", "ROLE", "ENDPOINT", "MESSAGE")
	}
	for _, db := range v.dbs {
		head := []cell{plain(db.Name), phaseCell(string(db.Status.Phase)), plain(dash(db.Status.ReadySummary))}
		if v.allNamespaces {
			head = append([]cell{plain(db.Namespace)}, head...)
		}
		blank := make([]cell, len(head))
		if len(db.Status.Clusters) == 0 {
			row := append(head, plain("-"), plain("-"), plain("-"), plain(fmt.Sprintf("-/%d", db.Generation)), plain("-"))
			if wide {
				row = append(row, plain("-"), plain("-"), plain("-"), plain(dash(notReadyMessage(&db))))
			}
			t.add(row...)
			continue
		}
		for i, c := range db.Status.Clusters {
			row := slices.Clone(head)
			if i > 0 {
				row = slices.Clone(blank)
			}
			var synced time.Time
			if c.LastSyncTime != nil {
				synced = c.LastSyncTime.Time
			}
			gen := cell{text: fmt.Sprintf("%d/%d", c.ObservedGeneration, db.Generation)}
			if c.ObservedGeneration != db.Generation {
				gen.colour = yellow
			}
			row = append(row, plain(c.Name), phaseCell(string(c.Phase)), plain(fmt.Sprintf("%d/%d", c.ReadyReplicas, c.Replicas)), gen, plain(age(synced, now)))
			if wide {
				row = append(row, plain(dash(string(c.Backend))), plain(dash(string(c.Role))), plain(dash(c.Endpoint)), plain(dash(c.Message)))
			}
			t.add(row...)
		}
	}
	return t
}

// notReadyMessage is the message of the Ready condition when it is not True.
func notReadyMessage(db *fleetv1alpha1.Database) string {
	if c := meta.FindStatusCondition(db.Status.Conditions, fleetv1alpha1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue {
		return c.Message
	}
	return ""
}

// phaseCell colours a phase: Ready green, failures red, the rest yellow.
func phaseCell(phase string) cell {
	switch phase {
	case "":
		return plain("-")
	case string(fleetv1alpha1.PhaseReady):
		return cell{text: phase, colour: green}
	case string(fleetv1alpha1.PhaseDegraded), string(fleetv1alpha1.PhaseFailed),
		string(fleetv1alpha1.ClusterPhaseUnreachable), string(fleetv1alpha1.ClusterPhaseConflict):
		return cell{text: phase, colour: red}
	}
	return cell{text: phase, colour: yellow}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printList prints the view's objects as a v1 List in JSON or YAML, without managedFields.
func printList(w io.Writer, format string, v *fleetView) error {
	list := &corev1.List{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}}
	add := func(obj client.Object, kind string) {
		obj.SetManagedFields(nil)
		obj.GetObjectKind().SetGroupVersionKind(fleetv1alpha1.GroupVersion.WithKind(kind))
		list.Items = append(list.Items, k8sruntime.RawExtension{Object: obj})
	}
	for i := range v.members {
		add(&v.members[i], "MemberCluster")
	}
	for i := range v.dbs {
		add(&v.dbs[i], "Database")
	}
	printer, err := genericclioptions.NewJSONYamlPrintFlags().ToPrinter(format)
	if err != nil {
		return err
	}
	return printer.PrintObj(list, w)
}

// watchLoop redraws the view whenever a MemberCluster or a listed Database
// changes: on a terminal it clears the screen first, piped it prints the
// whole view again after a blank line. An unchanged view is not printed again.
func (s *statusOptions) watchLoop(ctx context.Context, c client.WithWatch, ns, name string) error {
	colour, tty := s.colour(), s.isTerminal()
	changes := make(chan struct{}, 1)
	go s.watchKind(ctx, c, &fleetv1alpha1.MemberClusterList{}, nil, changes)
	go s.watchKind(ctx, c, &fleetv1alpha1.DatabaseList{}, []client.ListOption{client.InNamespace(ns)}, changes)
	var last []byte
	for {
		v, err := s.gather(ctx, c, ns, name)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		var b bytes.Buffer
		v.render(&b, s.output == "wide", colour, time.Now())
		if !bytes.Equal(b.Bytes(), last) {
			switch {
			case tty:
				fmt.Fprint(s.streams.Out, "\x1b[H\x1b[2J")
			case last != nil:
				fmt.Fprintln(s.streams.Out)
			}
			_, _ = s.streams.Out.Write(b.Bytes())
			last = b.Bytes()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		}
		// Coalesce a burst of events (a status write per member) into one redraw.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// watchKind signals changes on every event of a watch of list, and opens
// the watch again when the server ends it (every few minutes, by its timeout).
func (s *statusOptions) watchKind(ctx context.Context, c client.WithWatch, list client.ObjectList, opts []client.ListOption, changes chan<- struct{}) {
	timeout := int64(300)
	for ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(ctx, time.Duration(timeout+30)*time.Second)
		w, err := c.Watch(wctx, list, append(opts, &client.ListOptions{Raw: &metav1.ListOptions{TimeoutSeconds: &timeout}})...)
		if err == nil {
			for range w.ResultChan() {
				select {
				case changes <- struct{}{}:
				default:
				}
			}
			w.Stop()
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		// A new watch starts after the last list: redraw from a fresh read.
		select {
		case changes <- struct{}{}:
		default:
		}
	}
}
