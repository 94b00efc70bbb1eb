package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	memberdeploy "github.com/fleetdb/fleetdb/deploy/member"
)

type unjoinOptions struct {
	*options
	force            bool
	memberKubeconfig string
	memberContext    string
	allowInsecure    bool
}

func newUnjoinCommand(o *options) *cobra.Command {
	u := &unjoinOptions{options: o}
	cmd := &cobra.Command{
		Use:   "unjoin NAME [--member-kubeconfig FILE] [--force]",
		Short: "Remove a member from the hub's registry (refused while Databases are placed there)",
		Long: `unjoin deletes the MemberCluster NAME and its kubeconfig Secret on the hub and,
with --member-kubeconfig, the hub's identity in the member (the Namespace
fleetdb-system is kept: other things may live there).

It refuses while any Database is placed on the member. With --force it goes on
and prints what it leaves: fleetdb never cleans a member removed from the
registry, so those Databases' objects (workload, volume claims, credentials)
stay in the member, and each Database lists it in status.leftBehind. To move
Databases off a member first, use kubectl fleetdb drain.`,
		Args: exactArgs(1, "the member NAME"),
		RunE: func(cmd *cobra.Command, args []string) error { return u.run(cmd.Context(), args[0]) },
	}
	cmd.Flags().BoolVar(&u.force, "force", false, "unjoin even though Databases are placed on the member (their objects stay there)")
	cmd.Flags().StringVar(&u.memberKubeconfig, "member-kubeconfig", "", "admin kubeconfig of the member, to remove the hub's identity there")
	cmd.Flags().StringVar(&u.memberContext, "member-context", "", "context of --member-kubeconfig")
	cmd.Flags().BoolVar(&u.allowInsecure, flagAllowInsecure, false, allowInsecureUsage)
	return cmd
}

func (u *unjoinOptions) run(ctx context.Context, name string) error {
	hub, err := u.hubClient()
	if err != nil {
		return err
	}
	out := u.streams.Out
	// The member kubeconfig is checked before anything is removed.
	var memberCfg *rest.Config
	if u.memberKubeconfig != "" {
		j := &joinOptions{options: u.options, memberKubeconfig: u.memberKubeconfig, memberContext: u.memberContext, allowInsecure: u.allowInsecure}
		if memberCfg, err = j.memberConfig(); err != nil {
			return err
		}
	}
	var mc fleetv1alpha1.MemberCluster
	err = u.call(ctx, func(ctx context.Context) error { return hub.Get(ctx, types.NamespacedName{Name: name}, &mc) })
	registered := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading MemberCluster %s: %w", name, err)
	}
	placed, err := u.placedOn(ctx, hub, name)
	if err != nil {
		return err
	}
	if len(placed) > 0 && !u.force {
		fmt.Fprintf(out, "refusing to unjoin %s: %d Database(s) are placed there:\n", name, len(placed))
		for _, p := range placed {
			fmt.Fprintf(out, "  %s\n", p)
		}
		fmt.Fprintf(out, "move them first (kubectl fleetdb drain %s --yes), or pass --force to leave their objects in the member\n", name)
		return refusedError{fmt.Errorf("databases placed on %s", name)}
	}
	if registered {
		if err := u.deleteRegistration(ctx, hub, &mc); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(out, "unjoin: MemberCluster %s is not registered\n", name)
	}
	leftIdentity := true
	if memberCfg != nil {
		if err := u.removeIdentity(ctx, memberCfg); err != nil {
			return err
		}
		leftIdentity = false
	}
	u.printLeft(name, placed, leftIdentity)
	return nil
}

// placedOn lists the Databases (namespace/name) whose status places them on member.
func (u *unjoinOptions) placedOn(ctx context.Context, hub client.Client, member string) ([]string, error) {
	var dbs fleetv1alpha1.DatabaseList
	if err := u.call(ctx, func(ctx context.Context) error { return hub.List(ctx, &dbs) }); err != nil {
		return nil, fmt.Errorf("listing Databases: %w", err)
	}
	var out []string
	for _, db := range dbs.Items {
		if slices.ContainsFunc(db.Status.Clusters, func(c fleetv1alpha1.ClusterStatus) bool { return c.Name == member }) {
			out = append(out, db.Namespace+"/"+db.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// deleteRegistration deletes the MemberCluster, then its kubeconfig Secret
// when join wrote it (labelled for this member).
func (u *unjoinOptions) deleteRegistration(ctx context.Context, hub client.Client, mc *fleetv1alpha1.MemberCluster) error {
	out := u.streams.Out
	if err := u.call(ctx, func(ctx context.Context) error { return client.IgnoreNotFound(hub.Delete(ctx, mc)) }); err != nil {
		return fmt.Errorf("deleting MemberCluster %s: %w", mc.Name, err)
	}
	fmt.Fprintf(out, "unjoin: deleted MemberCluster %s\n", mc.Name)
	key := types.NamespacedName{Namespace: u.hubNamespace, Name: mc.Spec.KubeconfigSecretRef.Name}
	var s corev1.Secret
	err := u.call(ctx, func(ctx context.Context) error { return hub.Get(ctx, key, &s) })
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading Secret %s: %w", key, err)
	case s.Labels[labelMemberCluster] != mc.Name:
		fmt.Fprintf(out, "unjoin: left Secret %s: join did not write it (no label %s=%s); delete it yourself\n", key, labelMemberCluster, mc.Name)
		return nil
	}
	if err := u.call(ctx, func(ctx context.Context) error { return client.IgnoreNotFound(hub.Delete(ctx, &s)) }); err != nil {
		return fmt.Errorf("deleting Secret %s: %w", key, err)
	}
	fmt.Fprintf(out, "unjoin: deleted Secret %s\n", key)
	return nil
}

// removeIdentity deletes deploy/member's objects from the member, but not
// its Namespace, in the reverse of their install order: the token and the
// bindings first, the admission policies last, so that an unjoin cut short
// (a refused or failed delete, an interrupt) never leaves the identity's
// token or rights without the policies that confine them.
func (u *unjoinOptions) removeIdentity(ctx context.Context, cfg *rest.Config) error {
	member, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	objs, err := memberdeploy.Render()
	if err != nil {
		return err
	}
	var names []string
	for _, obj := range slices.Backward(objs) {
		if obj.GetKind() == "Namespace" {
			continue
		}
		if err := u.call(ctx, func(ctx context.Context) error { return client.IgnoreNotFound(member.Delete(ctx, obj)) }); err != nil {
			return fmt.Errorf("deleting %s %s in the member: %w", obj.GetKind(), obj.GetName(), err)
		}
		names = append(names, obj.GetKind()+" "+obj.GetName())
	}
	fmt.Fprintf(u.streams.Out, "unjoin: removed the hub's identity from the member (%s)\n", strings.Join(names, ", "))
	return nil
}

// printLeft says exactly what unjoin leaves behind.
func (u *unjoinOptions) printLeft(name string, placed []string, identity bool) {
	out := u.streams.Out
	fmt.Fprintf(out, "unjoin: %s is no longer a member. Left behind:\n", name)
	for _, p := range placed {
		ns, db, _ := strings.Cut(p, "/")
		fmt.Fprintf(out, "  - Database %s: its objects in %s (namespace %s: workload, volume claims, credentials Secret) stay; fleetdb never cleans a member removed from the registry (status.leftBehind of %s says so)\n",
			p, name, ns, db)
	}
	if identity {
		fmt.Fprintf(out, "  - the hub's identity in %s (ServiceAccount %s/%s, its token, ClusterRole and admission policy): run again with --member-kubeconfig, or kubectl delete -k deploy/member there\n",
			name, memberdeploy.Namespace, memberdeploy.ServiceAccount)
	} else {
		fmt.Fprintf(out, "  - the Namespace %s in %s (other things may live there)\n", memberdeploy.Namespace, name)
	}
}
