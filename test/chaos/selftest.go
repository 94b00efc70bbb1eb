package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// selfTest proves the checks can fail: with the hub stopped (so that
// nothing is put back), it breaks the fleet in one way per invariant and
// records which breakages one check pass reports.
func (r *runner) selfTest(ctx context.Context) error {
	_ = r.hub.Kill() // a hub that exited already is fine: the cycle restarts it
	r.rep.SelfTest = map[string]bool{}
	sabotage := map[string]func() error{}
	// Any live Database with objects in a member.
	var db, m string
	for _, name := range slices.Sorted(maps.Keys(r.model.snap)) {
		if r.model.live[name] == nil {
			continue
		}
		for _, mm := range slices.Sorted(maps.Keys(r.model.snap[name])) {
			db, m = name, mm
			break
		}
		if db != "" {
			break
		}
	}
	if db != "" {
		c := r.memberC[m]
		sabotage[InvPassword] = func() error {
			patch := fmt.Appendf(nil, `{"stringData":{%q:"not-the-password"}}`, member.CredentialsPasswordKey)
			return c.Patch(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: db + "-credentials"}},
				client.RawPatch(types.MergePatchType, patch))
		}
		sabotage[InvExact] = func() error {
			if r.model.live[db].backend == fleetv1alpha1.BackendCloudNativePG {
				u := member.NewCNPGCluster()
				u.SetNamespace(Namespace)
				u.SetName(db)
				return c.Patch(ctx, u, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"instances":7}}`)))
			}
			return c.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: db}})
		}
	}
	sabotage[InvOrphan] = func() error {
		return r.memberC[r.members[0]].Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Namespace: Namespace, Name: "never-a-database-config",
			Labels: map[string]string{
				fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue, fleetv1alpha1.LabelDatabaseNamespace: Namespace,
				fleetv1alpha1.LabelDatabaseName: "never-a-database",
			},
		}})
	}
	for _, k := range r.model.kept {
		if k.Kind == "Secret" || k.Kind == "ConfigMap" || k.Kind == "Service" {
			obj, err := newObject(k.Kind)
			if err != nil {
				return err
			}
			obj.SetNamespace(Namespace)
			obj.SetName(k.Name)
			sabotage[InvKept] = func() error { return r.memberC[k.Member].Delete(ctx, obj) }
			break
		}
	}
	for _, inv := range slices.Sorted(maps.Keys(sabotage)) {
		if err := sabotage[inv](); err != nil {
			return fmt.Errorf("self-test: breaking %q: %w", inv, err)
		}
		r.rep.SelfTest[inv] = false
	}
	probs, _, err := r.check(ctx, true)
	if err != nil {
		return fmt.Errorf("self-test: %w", err)
	}
	for _, p := range probs {
		if _, ok := r.rep.SelfTest[p.inv]; ok {
			r.rep.SelfTest[p.inv] = true
		}
		r.logf("self-test: reported: %s: %s", p.inv, p.msg)
	}
	return nil
}
