package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
)

// Invariants, as named in findings.
const (
	InvConverged  = "converged"
	InvExact      = "exact objects"
	InvOrphan     = "no orphan"
	InvDuplicate  = "no duplicate"
	InvKept       = "kept objects kept"
	InvGone       = "deleted objects gone"
	InvPassword   = "password unchanged"
	InvLeftoverJb = "no Job left"
)

// settle is how long a restarted hub runs before the fleet is checked.
const settle = 5 * time.Second

// problem is one broken invariant seen by a check pass.
type problem struct{ inv, msg string }

// converge waits until the hub reports every live Database Ready on its
// generation on exactly its placement, every deleted one gone, and the
// members pass every invariant; on timeout what is still wrong becomes the
// cycle's findings. Then it records the objects seen (snapshot).
func (r *runner) converge(ctx context.Context) error {
	deadline := time.Now().Add(r.cfg.ConvergeTimeout)
	// Not before the new hub has connected to the members and acted (the
	// status it found may still be the killed hub's): and a Ready flap at
	// its start is seen within the cycle.
	if err := sleep(ctx, time.Until(r.hubStarted.Add(settle))); err != nil {
		return err
	}
	var last []problem
	for {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		probs, snap, err := r.check(cctx, false)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			probs = append(probs, problem{InvConverged, "reading the fleet: " + err.Error()})
		}
		if len(probs) == 0 {
			r.model.snap = snap
			n := 0
			for _, members := range snap {
				for _, objs := range members {
					n += len(objs)
				}
			}
			r.logf("seed %d cycle %d: converged: %d live Databases (%d member objects), %d gone, %d objects kept by policy, %d gone by policy",
				r.seed, r.cycle, len(r.model.live), n, len(r.model.gone), len(r.model.kept), len(r.model.mustGo))
			return nil
		}
		last = probs
		if exited, werr := r.hub.Exited(); exited {
			last = append(last, problem{InvConverged, fmt.Sprintf("the hub exited on its own (%v); see %s", werr, r.hub.LogPath)})
			break
		}
		if time.Now().After(deadline) {
			break
		}
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
	}
	if dead := r.fleet.DeadComponents(); len(dead) > 0 {
		last = append(last, problem{InvConverged, "the fleet itself lost " + strings.Join(dead, ", ") + " (not the hub's doing: the findings above may follow from it)"})
	}
	for _, p := range last {
		r.rep.finding(Finding{Cycle: r.cycle, Seed: r.seed, Step: r.cur, Invariant: p.inv, Message: p.msg})
	}
	r.logf("cycle %d: %d findings after %s", r.cycle, len(last), r.cfg.ConvergeTimeout)
	// Go on from what is there: later cycles still check their own work.
	if _, snap, err := r.check(ctx, true); err == nil {
		for name, members := range snap {
			r.model.snap[name] = members
		}
	}
	if exited, _ := r.hub.Exited(); exited {
		if err := r.startHub(ctx); err != nil {
			return err
		}
	}
	return errConverge
}

// check runs one pass over the hub and the members; the members are
// checked only once the hub converged, unless always.
func (r *runner) check(ctx context.Context, always bool) ([]problem, map[string]map[string][]objRef, error) {
	var probs []problem
	add := func(inv, format string, args ...any) {
		probs = append(probs, problem{inv, fmt.Sprintf(format, args...)})
	}

	var list fleetv1alpha1.DatabaseList
	if err := r.hubC.List(ctx, &list, client.InNamespace(Namespace)); err != nil {
		return nil, nil, err
	}
	dbs := map[string]*fleetv1alpha1.Database{}
	for i := range list.Items {
		db := &list.Items[i]
		if dbs[db.Name] != nil {
			add(InvDuplicate, "Database %s listed twice on the hub", db.Name)
		}
		dbs[db.Name] = db
		if r.model.live[db.Name] == nil && r.model.gone[db.Name] == nil {
			add(InvDuplicate, "Database %s on the hub was never created by the run", db.Name)
		}
	}
	creds := map[string]map[string][]byte{}
	for _, name := range slices.Sorted(maps.Keys(r.model.live)) {
		db := dbs[name]
		if db == nil {
			add(InvConverged, "Database %s is missing on the hub", name)
			continue
		}
		if msg := notConverged(db, r.model.live[name].placement); msg != "" {
			add(InvConverged, "Database %s: %s", name, msg)
		}
		data, msg := r.hubCredentials(ctx, db)
		if msg != "" {
			add(InvPassword, "Database %s: %s", name, msg)
			continue
		}
		creds[name] = data
	}
	for name := range r.model.gone {
		if db := dbs[name]; db != nil {
			add(InvConverged, "Database %s was deleted and is still on the hub (phase %s)", name, db.Status.Phase)
		}
	}
	if len(probs) > 0 && !always {
		// The hub has not converged: the members are checked once it has.
		return probs, nil, nil
	}
	snap := map[string]map[string][]objRef{}
	for _, m := range r.members {
		mp, err := r.checkMember(ctx, m, dbs, creds, snap)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", m, err)
		}
		probs = append(probs, mp...)
	}
	kp, err := r.checkKept(ctx)
	if err != nil {
		return nil, nil, err
	}
	return append(probs, kp...), snap, nil
}

// notConverged says why the hub does not report db Ready on its generation
// on exactly the placement; "" when it does.
func notConverged(db *fleetv1alpha1.Database, placement []string) string {
	ready := meta.FindStatusCondition(db.Status.Conditions, fleetv1alpha1.ConditionReady)
	var clusters []string
	for _, c := range db.Status.Clusters {
		clusters = append(clusters, c.Name)
	}
	sort.Strings(clusters)
	switch {
	case db.DeletionTimestamp != nil:
		return "being deleted though the run did not delete it"
	case db.Status.ObservedGeneration != db.Generation:
		return fmt.Sprintf("observedGeneration %d, generation %d (phase %s)", db.Status.ObservedGeneration, db.Generation, db.Status.Phase)
	case ready == nil || ready.Status != "True" || ready.ObservedGeneration != db.Generation:
		return fmt.Sprintf("not Ready on generation %d (phase %s, Ready %v)", db.Generation, db.Status.Phase, ready)
	case !slices.Equal(clusters, placement):
		return fmt.Sprintf("status.clusters %v, placement %v", clusters, placement)
	case int(db.Status.ReadyClusters) != len(placement):
		return fmt.Sprintf("readyClusters %d of %d", db.Status.ReadyClusters, len(placement))
	}
	return ""
}

// hubCredentials reads the hub's credentials Secret of db and checks that
// its password is the one first seen.
func (r *runner) hubCredentials(ctx context.Context, db *fleetv1alpha1.Database) (map[string][]byte, string) {
	var s corev1.Secret
	if err := r.hubC.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name + "-credentials"}, &s); err != nil {
		return nil, "reading the hub credentials Secret: " + err.Error()
	}
	pw := string(s.Data[member.CredentialsPasswordKey])
	if pw == "" {
		return nil, "the hub credentials Secret has no password"
	}
	if first, ok := r.model.hubPasswords[db.Name]; ok && first != pw {
		return nil, "the hub credentials Secret's password changed" // never the value
	}
	r.model.hubPasswords[db.Name] = pw
	return s.Data, ""
}

// expected is what the hub renders for db in the member (member.Render,
// without the Namespace; the instance TLS Secret's data is a placeholder) plus the volume claims its StatefulSet makes:
// "Kind/name".
func expected(db *fleetv1alpha1.Database, cluster string, creds map[string][]byte) (map[string]client.Object, error) {
	// The hub renders a StatefulSet-backend postgres Database with its
	// instance certificates: their presence decides the objects (the TLS
	// Secret), not their bytes, which the comparison never reads.
	tls := &member.InstanceCertificates{CACert: []byte("ca"), ServerCert: []byte("crt"), ServerKey: []byte("key")}
	objs, err := member.Render(member.Params{Database: db, Cluster: cluster, Credentials: creds, InstanceTLS: tls})
	if err != nil {
		return nil, err
	}
	out := map[string]client.Object{}
	for _, o := range objs {
		kind := o.GetObjectKind().GroupVersionKind().Kind
		if kind == "Namespace" {
			continue
		}
		out[kind+"/"+o.GetName()] = o
		if sts, ok := o.(*appsv1.StatefulSet); ok {
			for _, t := range sts.Spec.VolumeClaimTemplates {
				for i := range member.EffectiveReplicas(db, cluster) {
					out["PersistentVolumeClaim/"+t.Name+"-"+sts.Name+"-"+strconv.Itoa(int(i))] = nil
				}
			}
		}
	}
	return out, nil
}

// workloadDiff compares what decides the running database between the
// rendered workload and the live one (the generation written, the
// instances, the image); "" when they agree.
func workloadDiff(want, have client.Object) string {
	gen := fleetv1alpha1.AnnotationGeneration
	if w, h := want.GetAnnotations()[gen], have.GetAnnotations()[gen]; w != h {
		return fmt.Sprintf("written for generation %s, the Database's is %s", h, w)
	}
	switch w := want.(type) {
	case *appsv1.StatefulSet:
		h, ok := have.(*appsv1.StatefulSet)
		if !ok {
			return "not a StatefulSet"
		}
		if ptr.Deref(w.Spec.Replicas, 1) != ptr.Deref(h.Spec.Replicas, 1) {
			return fmt.Sprintf("replicas %d, want %d", ptr.Deref(h.Spec.Replicas, 1), ptr.Deref(w.Spec.Replicas, 1))
		}
		if wi, hi := w.Spec.Template.Spec.Containers[0].Image, h.Spec.Template.Spec.Containers[0].Image; wi != hi {
			return fmt.Sprintf("image %s, want %s", hi, wi)
		}
	case *unstructured.Unstructured:
		h, ok := have.(*unstructured.Unstructured)
		if !ok {
			return "not a Cluster"
		}
		for _, f := range [][]string{{"spec", "instances"}, {"spec", "imageName"}} {
			wv, _, _ := unstructured.NestedFieldNoCopy(w.Object, f...)
			hv, _, _ := unstructured.NestedFieldNoCopy(h.Object, f...)
			if fmt.Sprint(wv) != fmt.Sprint(hv) {
				return fmt.Sprintf("%s %v, want %v", strings.Join(f, "."), hv, wv)
			}
		}
	}
	return ""
}

// memberKinds are the kinds listed in a member, with fleetdb's labels.
func memberKinds() map[string]func() client.ObjectList {
	return map[string]func() client.ObjectList{
		"StatefulSet":           func() client.ObjectList { return &appsv1.StatefulSetList{} },
		"PodDisruptionBudget":   func() client.ObjectList { return &policyv1.PodDisruptionBudgetList{} },
		"Service":               func() client.ObjectList { return &corev1.ServiceList{} },
		"ConfigMap":             func() client.ObjectList { return &corev1.ConfigMapList{} },
		"Secret":                func() client.ObjectList { return &corev1.SecretList{} },
		"PersistentVolumeClaim": func() client.ObjectList { return &corev1.PersistentVolumeClaimList{} },
		"Job":                   func() client.ObjectList { return &batchv1.JobList{} },
		"Cluster":               func() client.ObjectList { return member.NewCNPGClusterList() },
	}
}

// listManaged lists every object of the chaos namespace in a member that
// carries app.kubernetes.io/managed-by=fleetdb.
func (r *runner) listManaged(ctx context.Context, c client.Client) ([]client.Object, error) {
	var out []client.Object
	for kind, newList := range memberKinds() {
		l := newList()
		if err := c.List(ctx, l, client.InNamespace(Namespace), client.MatchingLabels{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}); err != nil {
			return nil, fmt.Errorf("listing %ss: %w", kind, err)
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			o, ok := it.(client.Object)
			if !ok {
				continue
			}
			if o.GetObjectKind().GroupVersionKind().Kind == "" {
				// Typed lists leave the items' kind empty.
				o.GetObjectKind().SetGroupVersionKind(o.GetObjectKind().GroupVersionKind().GroupVersion().WithKind(kind))
			}
			out = append(out, o)
		}
	}
	return out, nil
}

func kindOf(o client.Object) string { return o.GetObjectKind().GroupVersionKind().Kind }

// checkMember checks one member against the hub's Databases and fills snap
// with the objects it holds for each.
func (r *runner) checkMember(ctx context.Context, m string, dbs map[string]*fleetv1alpha1.Database,
	creds map[string]map[string][]byte, snap map[string]map[string][]objRef) ([]problem, error) {
	var probs []problem
	add := func(inv, format string, args ...any) {
		probs = append(probs, problem{inv, m + ": " + fmt.Sprintf(format, args...)})
	}
	objs, err := r.listManaged(ctx, r.memberC[m])
	if err != nil {
		return nil, err
	}
	byDB := map[string][]client.Object{}
	for _, o := range objs {
		l := o.GetLabels()
		if l[fleetv1alpha1.LabelComponent] == fleetv1alpha1.ComponentBackup {
			if kindOf(o) == "Job" {
				add(InvLeftoverJb, "backup Job %s of %s left after convergence", o.GetName(), l[fleetv1alpha1.LabelBackupOfName])
			}
			continue // backup volume claims outlive their Database by design
		}
		byDB[l[fleetv1alpha1.LabelDatabaseName]] = append(byDB[l[fleetv1alpha1.LabelDatabaseName]], o)
	}
	for name, have := range byDB {
		info := r.model.live[name]
		if info == nil || !slices.Contains(info.placement, m) {
			var what []string
			for _, o := range have {
				what = append(what, kindOf(o)+"/"+o.GetName())
			}
			sort.Strings(what)
			add(InvOrphan, "objects labelled for %s, which is %s: %s", name, whereNot(info), strings.Join(what, ", "))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.model.live)) {
		info := r.model.live[name]
		if !slices.Contains(info.placement, m) || creds[name] == nil {
			continue
		}
		db := dbs[name]
		want, err := expected(db, m, creds[name])
		if err != nil {
			return nil, fmt.Errorf("rendering %s: %w", name, err)
		}
		probs = append(probs, r.compare(ctx, m, db, want, byDB[name], creds[name], snap)...)
	}
	return probs, nil
}

func whereNot(info *dbInfo) string {
	if info == nil {
		return "gone"
	}
	return "not placed there"
}

// compare checks that have (the labelled objects of db in member m) is
// exactly want, of db's UID, with the hub's password, and records them.
func (r *runner) compare(ctx context.Context, m string, db *fleetv1alpha1.Database, want map[string]client.Object,
	have []client.Object, creds map[string][]byte, snap map[string]map[string][]objRef) []problem {
	var probs []problem
	add := func(inv, format string, args ...any) {
		probs = append(probs, problem{inv, m + ": " + db.Name + ": " + fmt.Sprintf(format, args...)})
	}
	seen := map[string]bool{}
	for _, o := range have {
		key := kindOf(o) + "/" + o.GetName()
		if seen[key] {
			add(InvDuplicate, "%s listed twice", key)
		}
		seen[key] = true
		w, ok := want[key]
		switch {
		case !ok:
			add(InvExact, "unexpected %s", key)
		case w != nil && (kindOf(o) == "StatefulSet" || kindOf(o) == "Cluster"):
			if d := workloadDiff(w, o); d != "" {
				add(InvExact, "%s: %s", key, d)
			}
		}
		if uid := o.GetLabels()[fleetv1alpha1.LabelDatabaseUID]; uid != string(db.UID) && kindOf(o) != "PersistentVolumeClaim" {
			add(InvExact, "%s is labelled for Database UID %s, the Database's is %s", key, uid, db.UID)
		}
		if snap[db.Name] == nil {
			snap[db.Name] = map[string][]objRef{}
		}
		snap[db.Name][m] = append(snap[db.Name][m], objRef{Member: m, Kind: kindOf(o), Name: o.GetName(), UID: o.GetUID()})
		if s, ok := o.(*corev1.Secret); ok && s.Name == db.Name+"-credentials" {
			pw := string(s.Data[member.CredentialsPasswordKey])
			if pw != string(creds[member.CredentialsPasswordKey]) {
				add(InvPassword, "the member credentials Secret's password differs from the hub's")
			}
			if first, ok := r.model.passwords[s.UID]; ok && first != pw {
				add(InvPassword, "the member credentials Secret's password changed")
			}
			r.model.passwords[s.UID] = pw
		}
	}
	for key := range want {
		if seen[key] {
			continue
		}
		// A volume claim kept from an earlier placement is used again
		// unlabelled; it must exist all the same.
		kind, name, _ := strings.Cut(key, "/")
		if kind == "PersistentVolumeClaim" {
			var pvc corev1.PersistentVolumeClaim
			if err := r.memberC[m].Get(ctx, client.ObjectKey{Namespace: Namespace, Name: name}, &pvc); err == nil {
				continue
			}
		}
		add(InvExact, "missing %s", key)
	}
	return probs
}

// checkKept checks that every object a policy kept is there with its UID
// (and, for Secrets, its password), every object that had to go is gone,
// and every final backup volume claim is there.
func (r *runner) checkKept(ctx context.Context) ([]problem, error) {
	var probs []problem
	get := func(o objRef) (client.Object, error) {
		obj, err := newObject(o.Kind)
		if err != nil {
			return nil, err
		}
		err = r.memberC[o.Member].Get(ctx, client.ObjectKey{Namespace: Namespace, Name: o.Name}, obj)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return obj, err
	}
	for _, k := range r.model.kept {
		obj, err := get(k.objRef)
		if err != nil {
			return nil, err
		}
		if obj == nil || obj.GetUID() != k.UID {
			probs = append(probs, problem{InvKept, fmt.Sprintf("%s: %s/%s (uid %s), kept by %s, is gone", k.Member, k.Kind, k.Name, k.UID, k.Why)})
			continue
		}
		if s, ok := obj.(*corev1.Secret); ok {
			if first, ok := r.model.passwords[s.UID]; ok && first != string(s.Data[member.CredentialsPasswordKey]) {
				probs = append(probs, problem{InvPassword, fmt.Sprintf("%s: the kept Secret %s's password changed", k.Member, k.Name)})
			}
		}
	}
	for _, g := range r.model.mustGo {
		obj, err := get(g)
		if err != nil {
			return nil, err
		}
		if obj != nil && obj.GetUID() == g.UID {
			probs = append(probs, problem{InvGone, fmt.Sprintf("%s: %s/%s (uid %s) should be gone", g.Member, g.Kind, g.Name, g.UID)})
		}
	}
	for i, b := range r.model.backupClaims {
		obj, err := get(b)
		if err != nil {
			return nil, err
		}
		switch {
		case obj == nil:
			probs = append(probs, problem{InvKept, fmt.Sprintf("%s: the final backup volume claim %s is missing", b.Member, b.Name)})
		case b.UID == "":
			r.model.backupClaims[i].UID = obj.GetUID()
		case obj.GetUID() != b.UID:
			probs = append(probs, problem{InvKept, fmt.Sprintf("%s: the final backup volume claim %s was replaced", b.Member, b.Name)})
		}
	}
	return probs, nil
}

func newObject(kind string) (client.Object, error) {
	switch kind {
	case "StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "Service":
		return &corev1.Service{}, nil
	case "ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "Secret":
		return &corev1.Secret{}, nil
	case "PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}, nil
	case "Job":
		return &batchv1.Job{}, nil
	case "Cluster":
		return member.NewCNPGCluster(), nil
	}
	return nil, fmt.Errorf("unknown kind %s", kind)
}
