package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega" //nolint:staticcheck // ST1001: gomega's DSL reads as assertions, as in Cluster API's test/framework
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// Cluster is one cluster of the fleet as the suite reaches it: an admin
// kubeconfig and an uncached client with fleetdb's scheme.
type Cluster struct {
	// Name is "hub" or the member's MemberCluster name.
	Name string
	// Kubeconfig is the path of the admin kubeconfig.
	Kubeconfig string
	// Config is the REST config built from Kubeconfig, with raised QPS.
	Config *rest.Config
	// Client reads straight from the API server (no cache), so what a spec
	// sees is what the cluster holds.
	Client client.Client
}

// NewCluster builds a Cluster from a kubeconfig file.
func NewCluster(name, kubeconfig string) (*Cluster, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig of %s (%s): %w", name, kubeconfig, err)
	}
	// The specs poll several clusters every 100ms; client-go's 5 QPS would throttle them.
	cfg.QPS, cfg.Burst = 200, 400
	cfg.Timeout = 30 * time.Second
	c, err := client.New(cfg, client.Options{Scheme: fleet.Scheme})
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", name, err)
	}
	return &Cluster{Name: name, Kubeconfig: kubeconfig, Config: cfg, Client: c}, nil
}

// restClientFor returns a REST client for raw paths such as /readyz.
func restClientFor(c *Cluster) (rest.Interface, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", c.Name, err)
	}
	return dc.RESTClient(), nil
}

// MemberControl stops and starts a member cluster's control plane, for specs
// that cut a member off. Fleets that cannot do that leave it nil.
type MemberControl interface {
	StopMember(ctx context.Context, name string) error
	StartMember(ctx context.Context, name string) error
}

// Intervals bound the waits of the specs. They are generous on purpose: the
// suite asserts behaviour, never speed (benchmarks measure speed).
type Intervals struct {
	// Ready bounds a Database (and its member workloads) becoming Ready.
	Ready time.Duration
	// Delete bounds a deletion (and its teardown in every member).
	Delete time.Duration
	// Unreachable bounds the hub noticing that a member is gone or back.
	Unreachable time.Duration
	// Hold is how long a spec watches that something does NOT happen.
	Hold time.Duration
	// Poll is the polling interval of Eventually and Consistently.
	Poll time.Duration
}

// DefaultIntervals suit a busy 2-core machine running a kwok fleet.
func DefaultIntervals() Intervals {
	return Intervals{Ready: 3 * time.Minute, Delete: 3 * time.Minute, Unreachable: 2 * time.Minute, Hold: 5 * time.Second, Poll: 200 * time.Millisecond}
}

// Fleet is the hub and its members as the specs see them.
type Fleet struct {
	Hub     *Cluster
	Members []*Cluster
	// Kubectl is the path of a kubectl binary.
	Kubectl string
	// Control stops and starts members; nil when this fleet cannot.
	Control MemberControl
	// Intervals bound the specs' waits.
	Intervals Intervals
}

// Member returns the member with the given name, or nil.
func (f *Fleet) Member(name string) *Cluster {
	for _, m := range f.Members {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// MemberNames are the members' names in the order given.
func (f *Fleet) MemberNames() []string {
	out := make([]string, 0, len(f.Members))
	for _, m := range f.Members {
		out = append(out, m.Name)
	}
	return out
}

// ---- namespaces ----

// CreateNamespaceInput is the input of CreateNamespace.
type CreateNamespaceInput struct {
	T     testing.TB
	Fleet *Fleet
	// Prefix of the generated name, e.g. "e2e-scale".
	Prefix string
}

// CreateNamespace creates a hub namespace with a random suffix and returns
// its name. When the test ends, the Databases in it are deleted (and waited
// for, up to a minute, so that the hub's teardown does not race the
// namespaces' deletion), then the namespace is deleted on the hub and in
// every member, so that specs leave long-lived fleets tidy.
func CreateNamespace(ctx context.Context, in CreateNamespaceInput) string {
	in.T.Helper()
	g := NewWithT(in.T)
	name := in.Prefix + "-" + randomSuffix()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"fleetdb.io/e2e": "true"}}}
	g.Expect(in.Fleet.Hub.Client.Create(ctx, ns)).To(Succeed())
	in.T.Cleanup(func() {
		// A fresh context: the spec's may be done.
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		hub := in.Fleet.Hub.Client
		if err := hub.DeleteAllOf(cctx, &fleetv1alpha1.Database{}, client.InNamespace(name)); err != nil {
			in.T.Logf("cleanup: deleting the Databases in %s: %v", name, err)
		}
		for deadline := time.Now().Add(time.Minute); ; {
			var dbs fleetv1alpha1.DatabaseList
			err := hub.List(cctx, &dbs, client.InNamespace(name))
			if err == nil && len(dbs.Items) == 0 {
				break
			}
			if time.Now().After(deadline) || cctx.Err() != nil {
				in.T.Logf("cleanup: Databases in %s not gone after a minute (%d left, %v); deleting the namespaces anyway", name, len(dbs.Items), err)
				break
			}
			time.Sleep(in.Fleet.Intervals.Poll)
		}
		for _, c := range append([]*Cluster{in.Fleet.Hub}, in.Fleet.Members...) {
			err := c.Client.Delete(cctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
			if err != nil && !apierrors.IsNotFound(err) {
				in.T.Logf("cleanup: deleting namespace %s in %s: %v", name, c.Name, err)
			}
		}
	})
	return name
}

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ---- Databases ----

// NewDatabase returns a postgres Database placed on the named members with
// the given replicas, a 1Gi volume and small requests (kwok nodes have room
// for it; kind nodes too).
func NewDatabase(namespace, name string, replicas int32, members []string) *fleetv1alpha1.Database {
	return &fleetv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: fleetv1alpha1.DatabaseSpec{
			Engine:   fleetv1alpha1.EnginePostgres,
			Version:  "17",
			Replicas: replicas,
			Storage:  fleetv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
			Resources: &fleetv1alpha1.ResourceSpec{Requests: &fleetv1alpha1.ComputeResources{
				CPU:    ptr.To(resource.MustParse("10m")),
				Memory: ptr.To(resource.MustParse("32Mi")),
			}},
			Placement: fleetv1alpha1.PlacementSpec{ClusterNames: slices.Clone(members)},
			Rollout:   fleetv1alpha1.RolloutSpec{MaxUnavailable: 1},
			// Spelled out: a Go client sends the zero Duration ("0s") for an
			// unset unreachableTimeout (a struct is never omitted by
			// omitempty), which would bypass the CRD's 10m default.
			Teardown: fleetv1alpha1.TeardownSpec{UnreachableTimeout: &metav1.Duration{Duration: 10 * time.Minute}},
			// Specs not about backups take none (a Job per member on every
			// delete); FinalBackupSpec sets its own.
			Backup: &fleetv1alpha1.BackupSpec{FinalBackup: fleetv1alpha1.FinalBackupSkip},
		},
	}
}

// GetDatabase reads a Database from the hub; it fails the test on any error.
func GetDatabase(ctx context.Context, g Gomega, f *Fleet, key types.NamespacedName) *fleetv1alpha1.Database {
	db := &fleetv1alpha1.Database{}
	g.Expect(f.Hub.Client.Get(ctx, key, db)).To(Succeed())
	return db
}

// UpdateDatabase applies mutate to the latest Database and updates it,
// retrying on conflicts (the hub writes status and finalizers concurrently).
// It returns the new generation.
func UpdateDatabase(ctx context.Context, t testing.TB, f *Fleet, key types.NamespacedName, mutate func(*fleetv1alpha1.Database)) int64 {
	t.Helper()
	var gen int64
	NewWithT(t).Eventually(func(g Gomega) {
		db := GetDatabase(ctx, g, f, key)
		mutate(db)
		g.Expect(f.Hub.Client.Update(ctx, db)).To(Succeed())
		gen = db.Generation
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(f.Intervals.Poll).Should(Succeed())
	return gen
}

// Condition returns the condition of that type, or a zero one with status "" when absent.
func Condition(conds []metav1.Condition, t string) metav1.Condition {
	if c := meta.FindStatusCondition(conds, t); c != nil {
		return *c
	}
	return metav1.Condition{Type: t}
}

// ClusterEntry returns the status entry of the named member, or nil.
func ClusterEntry(db *fleetv1alpha1.Database, name string) *fleetv1alpha1.ClusterStatus {
	for i := range db.Status.Clusters {
		if db.Status.Clusters[i].Name == name {
			return &db.Status.Clusters[i]
		}
	}
	return nil
}

// Entry returns the status entry of the named member, failing g when there is none.
func Entry(g Gomega, db *fleetv1alpha1.Database, name string) *fleetv1alpha1.ClusterStatus {
	e := ClusterEntry(db, name)
	g.Expect(e).NotTo(BeNil(), "no status entry for member %s", name)
	if e == nil {
		return &fleetv1alpha1.ClusterStatus{} // g does not stop (Consistently/Eventually polls)
	}
	return e
}

// WaitForDatabaseReadyInput is the input of WaitForDatabaseReady.
type WaitForDatabaseReadyInput struct {
	T     testing.TB
	Fleet *Fleet
	Key   types.NamespacedName
	// Members are the members the Database must be Ready on.
	Members []string
	// Replicas expected in every member (no overrides in the suite).
	Replicas int32
	// Version expected in every member's status entry; empty skips the check.
	Version string
}

// WaitForDatabaseReady waits until the hub reports the Database Ready on its
// current generation: Ready=True observed on that generation, phase Ready,
// every member's entry Ready on that generation with all replicas ready,
// Degraded=False. It returns the Database as last read.
func WaitForDatabaseReady(ctx context.Context, in WaitForDatabaseReadyInput) *fleetv1alpha1.Database {
	in.T.Helper()
	var db *fleetv1alpha1.Database
	NewWithT(in.T).Eventually(func(g Gomega) {
		db = GetDatabase(ctx, g, in.Fleet, in.Key)
		ready := Condition(db.Status.Conditions, fleetv1alpha1.ConditionReady)
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "Ready: %s", ready.Message)
		g.Expect(ready.ObservedGeneration).To(Equal(db.Generation), "Ready is about an older generation")
		g.Expect(db.Status.ObservedGeneration).To(Equal(db.Generation))
		g.Expect(db.Status.Phase).To(Equal(fleetv1alpha1.PhaseReady))
		g.Expect(Condition(db.Status.Conditions, fleetv1alpha1.ConditionDegraded).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(db.Status.TargetClusters).To(BeEquivalentTo(len(in.Members)))
		g.Expect(db.Status.ReadyClusters).To(BeEquivalentTo(len(in.Members)))
		g.Expect(db.Status.ReadySummary).To(Equal(fmt.Sprintf("%d/%d", len(in.Members), len(in.Members))))
		for _, m := range in.Members {
			e := Entry(g, db, m)
			g.Expect(e.Phase).To(Equal(fleetv1alpha1.ClusterPhaseReady), "%s: %s", m, e.Message)
			g.Expect(e.ObservedGeneration).To(Equal(db.Generation), m)
			g.Expect(e.Replicas).To(Equal(in.Replicas), m)
			g.Expect(e.ReadyReplicas).To(Equal(in.Replicas), m)
			if in.Version != "" {
				// The version running; CloudNativePG's names the minor release
				// fleetdb pinned for a major alone ("17" -> "17.10").
				g.Expect(e.Version == in.Version || strings.HasPrefix(e.Version, in.Version+".")).To(BeTrue(), "%s runs %q", m, e.Version)
			}
		}
	}).WithContext(ctx).WithTimeout(in.Fleet.Intervals.Ready).WithPolling(in.Fleet.Intervals.Poll).Should(Succeed())
	return db
}

// ---- member workloads ----

// PodSelector selects the pods of the hub Database namespace/name in a member.
func PodSelector(name string) client.MatchingLabels {
	return client.MatchingLabels{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue, fleetv1alpha1.LabelInstance: name}
}

// OwnedSelector selects the member objects fleetdb labels for the hub Database namespace/name.
func OwnedSelector(key types.NamespacedName) client.MatchingLabels {
	return client.MatchingLabels{
		fleetv1alpha1.LabelManagedBy:         fleetv1alpha1.ManagedByValue,
		fleetv1alpha1.LabelDatabaseNamespace: key.Namespace,
		fleetv1alpha1.LabelDatabaseName:      key.Name,
	}
}

// StatefulSetReadyOn reports whether the member's StatefulSet was last written
// for hub generation gen and has fully rolled out and become ready on it, as
// the member's own StatefulSet controller reports it.
func StatefulSetReadyOn(sts *appsv1.StatefulSet, gen int64) bool {
	if sts.Annotations[fleetv1alpha1.AnnotationGeneration] != strconv.FormatInt(gen, 10) {
		return false
	}
	want := int32(1)
	if sts.Spec.Replicas != nil {
		want = *sts.Spec.Replicas
	}
	s := sts.Status
	return s.ObservedGeneration == sts.Generation && s.Replicas == want && s.UpdatedReplicas == want &&
		s.ReadyReplicas == want && (s.UpdateRevision == "" || s.CurrentRevision == s.UpdateRevision)
}

// ImageTag is the tag of the engine container's image.
func ImageTag(sts *appsv1.StatefulSet) string {
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == string(fleetv1alpha1.EnginePostgres) || c.Name == string(fleetv1alpha1.EngineMySQL) {
			if i := strings.LastIndex(c.Image, ":"); i > strings.LastIndex(c.Image, "/") {
				return c.Image[i+1:]
			}
		}
	}
	return ""
}

// ExpectMemberWorkloadInput is the input of ExpectMemberWorkload.
type ExpectMemberWorkloadInput struct {
	T      testing.TB
	Fleet  *Fleet
	Member *Cluster
	// DB is the hub Database (name, namespace, UID, generation).
	DB       *fleetv1alpha1.Database
	Replicas int32
	// Version is the expected image tag; empty skips the check.
	Version string
	// CheckVolumes also requires a Bound claim (and a Bound volume) per replica.
	CheckVolumes bool
}

// ExpectMemberWorkload waits until the member runs the Database's current
// generation as seen by the member itself: its StatefulSet written for that
// generation with every replica updated and ready, that many pods scheduled
// with condition Ready=True, the Services, ConfigMap and credentials Secret,
// a PodDisruptionBudget exactly when replicas > 1 and, with CheckVolumes, a
// Bound claim of the requested size per replica, backed by a Bound volume.
func ExpectMemberWorkload(ctx context.Context, in ExpectMemberWorkloadInput) {
	in.T.Helper()
	if in.DB.EffectiveBackend() == fleetv1alpha1.BackendCloudNativePG {
		ExpectMemberCluster(ctx, in)
		return
	}
	key := client.ObjectKeyFromObject(in.DB)
	c := in.Member.Client
	NewWithT(in.T).Eventually(func(g Gomega) {
		sts := &appsv1.StatefulSet{}
		g.Expect(c.Get(ctx, key, sts)).To(Succeed())
		g.Expect(sts.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelManagedBy, fleetv1alpha1.ManagedByValue))
		g.Expect(sts.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelDatabaseUID, string(in.DB.UID)))
		g.Expect(sts.Annotations).To(HaveKeyWithValue(fleetv1alpha1.AnnotationGeneration, strconv.FormatInt(in.DB.Generation, 10)))
		g.Expect(sts.Spec.Replicas).To(HaveValue(Equal(in.Replicas)))
		g.Expect(StatefulSetReadyOn(sts, in.DB.Generation)).To(BeTrue(), "StatefulSet status %+v", sts.Status)
		if in.Version != "" {
			g.Expect(ImageTag(sts)).To(Equal(in.Version))
		}

		var pods corev1.PodList
		g.Expect(c.List(ctx, &pods, client.InNamespace(key.Namespace), PodSelector(key.Name))).To(Succeed())
		live := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
		g.Expect(live).To(HaveLen(int(in.Replicas)), "pods")
		for _, p := range live {
			g.Expect(p.Spec.NodeName).NotTo(BeEmpty(), "pod %s is not scheduled", p.Name)
			g.Expect(Condition(podConditions(p), string(corev1.PodReady)).Status).To(Equal(metav1.ConditionTrue), "pod %s is not Ready", p.Name)
			g.Expect(p.Labels).To(HaveKeyWithValue(controllerRevisionLabel, sts.Status.UpdateRevision), "pod %s runs an old revision", p.Name)
		}

		for _, name := range []string{key.Name, key.Name + "-hl"} {
			g.Expect(c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: name}, &corev1.Service{})).To(Succeed(), "Service %s", name)
		}
		g.Expect(c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: key.Name + "-config"}, &corev1.ConfigMap{})).To(Succeed())
		g.Expect(c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: key.Name + "-credentials"}, &corev1.Secret{})).To(Succeed())
		err := c.Get(ctx, key, &policyv1.PodDisruptionBudget{})
		if in.Replicas > 1 {
			g.Expect(err).NotTo(HaveOccurred(), "PodDisruptionBudget")
		} else {
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a PodDisruptionBudget with 1 replica: %v", err)
		}

		if in.CheckVolumes {
			for i := range in.Replicas {
				pvc := &corev1.PersistentVolumeClaim{}
				name := fmt.Sprintf("data-%s-%d", key.Name, i)
				g.Expect(c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: name}, pvc)).To(Succeed())
				g.Expect(pvc.Labels).To(HaveKeyWithValue(fleetv1alpha1.LabelDatabaseName, key.Name), "claim %s", name)
				g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound), "claim %s", name)
				pv := &corev1.PersistentVolume{}
				g.Expect(c.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv)).To(Succeed())
				g.Expect(pv.Status.Phase).To(Equal(corev1.VolumeBound), "volume of %s", name)
				g.Expect(pv.Spec.Capacity.Storage().Cmp(in.DB.Spec.Storage.Size)).To(BeNumerically(">=", 0), "volume of %s", name)
			}
		}
	}).WithContext(ctx).WithTimeout(in.Fleet.Intervals.Ready).WithPolling(in.Fleet.Intervals.Poll).Should(Succeed(), "member %s", in.Member.Name)
}

// controllerRevisionLabel is the label the StatefulSet controller puts on its pods.
const controllerRevisionLabel = "controller-revision-hash"

func podConditions(p corev1.Pod) []metav1.Condition {
	out := make([]metav1.Condition, 0, len(p.Status.Conditions))
	for _, c := range p.Status.Conditions {
		out = append(out, metav1.Condition{Type: string(c.Type), Status: metav1.ConditionStatus(c.Status)})
	}
	return out
}

// ManagedObjects lists, per kind, the names of the objects in the member that
// carry fleetdb's labels for the hub Database (pods included: the StatefulSet
// gives them the same labels).
func ManagedObjects(ctx context.Context, c client.Client, key types.NamespacedName) (map[string][]string, error) {
	lists := map[string]client.ObjectList{
		"StatefulSet":           &appsv1.StatefulSetList{},
		"Service":               &corev1.ServiceList{},
		"ConfigMap":             &corev1.ConfigMapList{},
		"Secret":                &corev1.SecretList{},
		"PodDisruptionBudget":   &policyv1.PodDisruptionBudgetList{},
		"PersistentVolumeClaim": &corev1.PersistentVolumeClaimList{},
		"Pod":                   &corev1.PodList{},
	}
	out := map[string][]string{}
	for kind, list := range lists {
		if err := c.List(ctx, list, client.InNamespace(key.Namespace), OwnedSelector(key)); err != nil {
			return nil, fmt.Errorf("listing %ss: %w", kind, err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			if o, ok := it.(client.Object); ok {
				out[kind] = append(out[kind], o.GetName())
			}
		}
	}
	return out, nil
}

// DeleteDatabaseAndWaitInput is the input of DeleteDatabaseAndWait.
type DeleteDatabaseAndWaitInput struct {
	T     testing.TB
	Fleet *Fleet
	Key   types.NamespacedName
}

// DeleteDatabaseAndWait deletes the Database and waits until it is gone from
// the hub, which only happens once the hub dropped its finalizer.
func DeleteDatabaseAndWait(ctx context.Context, in DeleteDatabaseAndWaitInput) {
	in.T.Helper()
	g := NewWithT(in.T)
	db := &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: in.Key.Namespace, Name: in.Key.Name}}
	if err := in.Fleet.Hub.Client.Delete(ctx, db); err != nil && !apierrors.IsNotFound(err) {
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Eventually(func(g Gomega) {
		err := in.Fleet.Hub.Client.Get(ctx, in.Key, &fleetv1alpha1.Database{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Database is still there (err %v)", err)
	}).WithContext(ctx).WithTimeout(in.Fleet.Intervals.Delete).WithPolling(in.Fleet.Intervals.Poll).Should(Succeed())
}

// ---- nodes ----

// SetNodesUnschedulable cordons (or uncordons) every node of a member, the way
// `kubectl cordon` does. Running pods stay; new pods stay Pending.
func SetNodesUnschedulable(ctx context.Context, c *Cluster, unschedulable bool) error {
	var nodes corev1.NodeList
	if err := c.Client.List(ctx, &nodes); err != nil {
		return fmt.Errorf("listing nodes of %s: %w", c.Name, err)
	}
	patch := []byte(fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, unschedulable))
	for i := range nodes.Items {
		if err := c.Client.Patch(ctx, &nodes.Items[i], client.RawPatch(types.MergePatchType, patch)); err != nil {
			return fmt.Errorf("cordoning node %s of %s: %w", nodes.Items[i].Name, c.Name, err)
		}
	}
	return nil
}

// ---- diagnostics ----

// DumpOnFailure registers a cleanup that, when the test failed, logs the hub
// Database objects of the namespace, the registry's view of the members and
// the members' StatefulSets, pods and claims in it. (The hub's own log is
// printed once, at the end of a failed run.)
func DumpOnFailure(t testing.TB, f *Fleet, namespace string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var dbs fleetv1alpha1.DatabaseList
		if err := f.Hub.Client.List(ctx, &dbs, client.InNamespace(namespace)); err != nil {
			t.Logf("dump: listing Databases: %v", err)
		}
		for i := range dbs.Items {
			db := dbs.Items[i]
			db.ManagedFields = nil
			b, _ := yaml.Marshal(db)
			t.Logf("dump: hub Database %s/%s:\n%s", db.Namespace, db.Name, b)
		}
		var mcs fleetv1alpha1.MemberClusterList
		if err := f.Hub.Client.List(ctx, &mcs); err == nil {
			for _, mc := range mcs.Items {
				r := Condition(mc.Status.Conditions, fleetv1alpha1.MemberConditionReady)
				t.Logf("dump: MemberCluster %s Ready=%s %s: %s", mc.Name, r.Status, r.Reason, r.Message)
			}
		}
		for _, m := range f.Members {
			var stss appsv1.StatefulSetList
			if err := m.Client.List(ctx, &stss, client.InNamespace(namespace)); err != nil {
				t.Logf("dump: %s: listing StatefulSets: %v", m.Name, err)
				continue
			}
			for _, s := range stss.Items {
				t.Logf("dump: %s: StatefulSet %s generation=%d annotations=%v status=%+v", m.Name, s.Name, s.Generation, s.Annotations, s.Status)
			}
			var pods corev1.PodList
			_ = m.Client.List(ctx, &pods, client.InNamespace(namespace))
			for _, p := range pods.Items {
				t.Logf("dump: %s: pod %s node=%q phase=%s ready=%s deleting=%t", m.Name, p.Name, p.Spec.NodeName, p.Status.Phase,
					Condition(podConditions(p), string(corev1.PodReady)).Status, p.DeletionTimestamp != nil)
			}
			var pvcs corev1.PersistentVolumeClaimList
			_ = m.Client.List(ctx, &pvcs, client.InNamespace(namespace))
			for _, p := range pvcs.Items {
				t.Logf("dump: %s: claim %s phase=%s volume=%s labels=%v", m.Name, p.Name, p.Status.Phase, p.Spec.VolumeName, p.Labels)
			}
		}
	})
}

// envOr is the environment variable key, or def when it is unset or empty.
func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
