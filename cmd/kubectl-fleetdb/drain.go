package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/placement"
)

type drainOptions struct {
	*options
	yes bool
}

func newDrainCommand(o *options) *cobra.Command {
	d := &drainOptions{options: o}
	cmd := &cobra.Command{
		Use:   "drain MEMBER [--yes]",
		Short: "Show which Databases would leave a member; with --yes cordon and drain it",
		Long: `drain prints the Databases that would lose MEMBER, where each goes (or that it
would have no member left) and what happens to the data left in MEMBER (the
Database's spec.teardown.onPlacementRemoval: Retain keeps the volume claims and
the credentials Secret, Delete removes them). The primary of a PrimaryStandby
Database is never moved by a drain: it stays until you switch it over.

Nothing changes without --yes. With --yes it sets the MemberCluster's
spec.unschedulable (no new placements) and spec.drain (existing placements
are dropped); kubectl fleetdb uncordon clears both. The preview is the fleet
as read now: the hub places every Database by the fleet as it is when it acts,
so changes made after the preview (a Database edited, a member cordoned or
relabelled) are placed by the hub's rules, not by the preview.`,
		Args: exactArgs(1, "the MEMBER name"),
		RunE: func(cmd *cobra.Command, args []string) error { return d.run(cmd.Context(), args[0]) },
	}
	cmd.Flags().BoolVar(&d.yes, "yes", false, "cordon and drain the member (without it, only show what would happen)")
	return cmd
}

// newCordonCommand is cordon (unschedulable only) or uncordon (clears cordon and drain).
func newCordonCommand(o *options, cordon bool) *cobra.Command {
	use, short := "cordon MEMBER", "Mark a member unschedulable: no new placements, existing ones stay"
	if !cordon {
		use, short = "uncordon MEMBER", "Make a member schedulable again and stop draining it"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(1, "the MEMBER name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.hubClient()
			if err != nil {
				return err
			}
			name := args[0]
			if cordon {
				if err := o.setScheduling(cmd.Context(), c, name, true, nil); err != nil {
					return err
				}
				fmt.Fprintf(o.streams.Out, "%s cordoned: no new placements; Databases placed there stay\n", name)
				return nil
			}
			if err := o.setScheduling(cmd.Context(), c, name, false, new(false)); err != nil {
				return err
			}
			fmt.Fprintf(o.streams.Out, "%s uncordoned: schedulable again, not draining; Databases whose placement selects it may be placed there again\n", name)
			return nil
		},
	}
}

// setScheduling applies spec.unschedulable (and spec.drain when given) to
// the MemberCluster under CordonFieldManager. The member must exist.
func (o *options) setScheduling(ctx context.Context, c client.Client, name string, unschedulable bool, drain *bool) error {
	var mc fleetv1alpha1.MemberCluster
	if err := o.call(ctx, func(ctx context.Context) error { return c.Get(ctx, types.NamespacedName{Name: name}, &mc) }); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("MemberCluster %s is not registered", name)
		}
		return err
	}
	spec := map[string]any{"unschedulable": unschedulable}
	if drain != nil {
		spec["drain"] = *drain
	}
	body := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": fleetv1alpha1.GroupVersion.String(), "kind": "MemberCluster",
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}}
	return o.call(ctx, func(ctx context.Context) error {
		return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(body), client.FieldOwner(CordonFieldManager), client.ForceOwnership)
	})
}

// drainImpact is what draining a member does to one Database.
type drainImpact struct {
	db *fleetv1alpha1.Database
	// held: the member holds the Database's PrimaryStandby primary and stays.
	held bool
	// before and after are the members the Database is placed on now and
	// after the drain.
	before, after []string
}

func (d *drainOptions) run(ctx context.Context, name string) error {
	c, err := d.hubClient()
	if err != nil {
		return err
	}
	impacts, err := d.preview(ctx, c, name)
	if err != nil {
		return err
	}
	printDrainPreview(d.streams.Out, name, impacts)
	if !d.yes {
		fmt.Fprintf(d.streams.Out, "nothing changed; run again with --yes to cordon and drain %s\n", name)
		return nil
	}
	if err := d.setScheduling(ctx, c, name, true, new(true)); err != nil {
		return err
	}
	fmt.Fprintf(d.streams.Out, "%s cordoned and draining: the hub moves the Databases above (follow with kubectl fleetdb status -A --watch)\n", name)
	return nil
}

// preview resolves, for every Database placed on member, the hub's
// placement with the member drained (placement.Resolve over the members
// its namespace may use).
func (d *drainOptions) preview(ctx context.Context, c client.Client, member string) ([]drainImpact, error) {
	var mcs fleetv1alpha1.MemberClusterList
	var dbs fleetv1alpha1.DatabaseList
	err := d.call(ctx, func(ctx context.Context) error {
		if err := c.List(ctx, &mcs); err != nil {
			return err
		}
		return c.List(ctx, &dbs)
	})
	if err != nil {
		return nil, fmt.Errorf("listing the fleet: %w", err)
	}
	if !slices.ContainsFunc(mcs.Items, func(m fleetv1alpha1.MemberCluster) bool { return m.Name == member }) {
		return nil, fmt.Errorf("MemberCluster %s is not registered", member)
	}
	for i := range mcs.Items {
		if mcs.Items[i].Name == member {
			mcs.Items[i].Spec.Unschedulable, mcs.Items[i].Spec.Drain = true, true
		}
	}
	nsLabels := map[string]map[string]string{}
	var out []drainImpact
	for i := range dbs.Items {
		db := &dbs.Items[i]
		current := placement.CurrentMembers(db)
		if !slices.Contains(current, member) {
			continue
		}
		if _, ok := nsLabels[db.Namespace]; !ok {
			var ns corev1.Namespace
			if err := d.call(ctx, func(ctx context.Context) error { return c.Get(ctx, types.NamespacedName{Name: db.Namespace}, &ns) }); err != nil {
				return nil, fmt.Errorf("reading namespace %s: %w", db.Namespace, err)
			}
			nsLabels[db.Namespace] = ns.Labels
		}
		allowed := admitted(mcs.Items, nsLabels[db.Namespace])
		placed, err := placement.Resolve(db, allowed, current)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", db.Namespace, db.Name, err)
		}
		out = append(out, drainImpact{db: db, held: slices.Contains(placed.DrainHeld, member), before: current, after: placed.Targets})
	}
	return out, nil
}

// admitted are the members whose spec.namespaceSelector admits a namespace
// with these labels (unset admits none), as the hub's tenancy rules say.
func admitted(members []fleetv1alpha1.MemberCluster, nsLabels map[string]string) []fleetv1alpha1.MemberCluster {
	var out []fleetv1alpha1.MemberCluster
	for i := range members {
		if ok, err := placement.NamespaceAllowed(&members[i], nsLabels); err == nil && ok {
			out = append(out, members[i])
		}
	}
	return out
}

func printDrainPreview(w io.Writer, member string, impacts []drainImpact) {
	var moved, held []drainImpact
	for _, im := range impacts {
		if im.held {
			held = append(held, im)
		} else {
			moved = append(moved, im)
		}
	}
	if len(impacts) == 0 {
		fmt.Fprintf(w, "No Database is placed on %s.\n", member)
	}
	if len(moved) > 0 {
		fmt.Fprintf(w, "Draining %s moves %d Database(s) off it:\n", member, len(moved))
		for _, im := range moved {
			fmt.Fprintf(w, "  %s/%s: %s; data left in %s: %s\n", im.db.Namespace, im.db.Name, whereTo(member, im), member, dataFate(im.db))
		}
	}
	if len(held) > 0 {
		fmt.Fprintf(w, "Staying on %s until switched over (a drain never drops a PrimaryStandby primary):\n", member)
		for _, im := range held {
			fmt.Fprintf(w, "  %s/%s: holds the primary; switch it over first: kubectl patch database %s -n %s --type merge -p '{\"spec\":{\"topology\":{\"primaryCluster\":\"<another member>\"}}}'\n",
				im.db.Namespace, im.db.Name, im.db.Name, im.db.Namespace)
		}
	}
}

// whereTo says where a Database goes when it loses member.
func whereTo(member string, im drainImpact) string {
	if len(im.after) == 0 {
		return "loses " + member + " and has NO member left"
	}
	var added []string
	for _, m := range im.after {
		if !slices.Contains(im.before, m) {
			added = append(added, m)
		}
	}
	if len(added) > 0 {
		return fmt.Sprintf("loses %s, moves to %s (placed on %s afterwards)", member, strings.Join(added, ", "), strings.Join(im.after, ", "))
	}
	return fmt.Sprintf("loses %s, stays on %s", member, strings.Join(im.after, ", "))
}

// dataFate is what the hub does with a member dropped from the Database's placement.
func dataFate(db *fleetv1alpha1.Database) string {
	if db.PlacementRemovalDeletionPolicy() == fleetv1alpha1.DeletionPolicyDelete {
		return "DELETED, volume claims included (spec.teardown.onPlacementRemoval: Delete)"
	}
	return "the workload goes, the volume claims and credentials Secret stay (spec.teardown.onPlacementRemoval: Retain)"
}
