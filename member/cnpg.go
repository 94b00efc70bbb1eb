package member

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
)

// DefaultCNPGImageRepository is where CloudNativePG's postgres operand images
// come from when Params.ImageRepository is empty; the image is
// "<repository>/postgresql:<CNPGImageTag>".
const DefaultCNPGImageRepository = "ghcr.io/cloudnative-pg"

// CloudNativePG's labels and annotations that fleetdb reads or writes.
const (
	// CNPGReloadLabel on a Secret makes CloudNativePG reconcile the Clusters
	// that use it when it changes. Without it CloudNativePG watches only the
	// Secrets a Cluster owns (isUsefulClusterSecret and hasReloadLabelSet in
	// internal/controller/cluster_predicates.go, v1.30.0; the key is
	// utils.WatchedLabelName, pkg/utils/labels_annotations.go): a new
	// password in fleetdb's credentials Secret, or a renewed certificate,
	// would reach PostgreSQL only at some unrelated reconcile. Only the key
	// is read.
	CNPGReloadLabel = "cnpg.io/reload"
	// cnpgClusterLabel names the Cluster on its pods and volume claims.
	cnpgClusterLabel = "cnpg.io/cluster"
	// cnpgInstanceRoleLabel is "primary" on the primary's pod.
	cnpgInstanceRoleLabel = "cnpg.io/instanceRole"
	// cnpgHibernationAnnotation set to "on" makes CloudNativePG stop every
	// instance and keep the volume claims.
	cnpgHibernationAnnotation = "cnpg.io/hibernation"
	// cnpgHibernationCondition is True with reason Hibernated once every
	// instance has stopped (see hibernationStarted for the other reasons).
	cnpgHibernationCondition = "cnpg.io/hibernation"
	// cnpgHealthyPhase is status.phase of a healthy Cluster.
	cnpgHealthyPhase = "Cluster in healthy state"
	// cnpgPort is the port of CloudNativePG's postgres instances.
	cnpgPort = 5432
)

// renderCNPG returns the member objects of the CloudNativePG backend in
// apply order: Namespace, credentials Secret (kubernetes.io/basic-auth, as
// CloudNativePG's initdb wants it), the client Service "<name>" (to the
// current primary, the same name the StatefulSet backend uses) and the
// Cluster. CloudNativePG creates its own "<name>-rw", "-ro" and "-r"
// Services, pods, volume claims and PodDisruptionBudgets.
//
// With Params.Topology (PrimaryStandby) the certificate Secrets come after
// the credentials and the Cluster is wired to the other members (see
// wireTopology).
func (r renderer) renderCNPG() []client.Object {
	objs := []client.Object{r.namespace(), r.basicAuthSecret()}
	if r.p.Topology != nil {
		objs = append(objs, r.topologySecrets()...)
	}
	return append(objs, r.primaryService(), r.cnpgCluster())
}

// basicAuthSecret is the credentials Secret, labelled cnpg.io/reload so
// that CloudNativePG reconciles the Cluster when it changes (a rotation).
func (r renderer) basicAuthSecret() *corev1.Secret {
	s := r.secret()
	s.Type = corev1.SecretTypeBasicAuth
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[CNPGReloadLabel] = "true"
	return s
}

// primaryService is the client Service "<name>": the primary, like CloudNativePG's "<name>-rw".
func (r renderer) primaryService() *corev1.Service {
	return r.clientService(
		map[string]string{cnpgClusterLabel: r.db.Name, cnpgInstanceRoleLabel: "primary"},
		[]corev1.ServicePort{{Name: "postgres", Port: cnpgPort, TargetPort: intstr.FromInt32(cnpgPort), Protocol: corev1.ProtocolTCP}},
	)
}

// cnpgImageVariant is the suffix of CloudNativePG's operand image tags
// that its own default uses: "system" images (PostgreSQL with the barman
// cloud tools) on Debian trixie (versions.DefaultImageName
// "ghcr.io/cloudnative-pg/postgresql:18.4-system-trixie" in
// pkg/versions/versions.go, v1.30.0).
const cnpgImageVariant = "-system-trixie"

// cnpgMinorOf is the PostgreSQL minor release fleetdb runs for a major
// version given alone ("17"): the newest one CloudNativePG v1.30.0 tests
// with (.github/pg_versions.json at that tag). "ghcr.io/cloudnative-pg/
// postgresql:<major>" is a rolling tag CloudNativePG no longer builds; a
// full tag does not move under a running Cluster (a moved tag would roll
// every instance at its next restart).
var cnpgMinorOf = map[string]string{
	"18": "18.4",
	"17": "17.10",
	"16": "16.14",
	"15": "15.18",
	"14": "14.23",
}

// CNPGImageTag is the operand image tag for a Database's postgres version:
// "<major>.<minor>-system-trixie", the minor taken from spec.version when
// it has one, else the pinned minor of the major. ok is false for a major
// alone that fleetdb has no pinned minor for (spec.version must then name
// the minor).
func CNPGImageTag(version string) (tag string, ok bool) {
	if !strings.Contains(version, ".") {
		if version, ok = cnpgMinorOf[version]; !ok {
			return "", false
		}
	}
	return version + cnpgImageVariant, true
}

// cnpgImage is CloudNativePG's operand image for the Database's version
// ("" when CNPGImageTag has none): "<repository>/postgresql:<tag>", the
// repository DefaultCNPGImageRepository or Params.ImageRepository (a
// platform team's mirror, which must carry the same tags).
func (r renderer) cnpgImage() string {
	tag, ok := CNPGImageTag(r.db.EffectiveVersion())
	if !ok {
		return ""
	}
	repo := strings.TrimSuffix(r.p.ImageRepository, "/")
	if repo == "" {
		repo = DefaultCNPGImageRepository
	}
	return repo + "/postgresql:" + tag
}

// cnpgCluster is the CloudNativePG Cluster with only the fields fleetdb sets.
func (r renderer) cnpgCluster() *unstructured.Unstructured {
	owner := string(r.p.Credentials[CredentialsUsernameKey])
	storage := map[string]any{"size": r.db.Spec.Storage.Size.String()}
	if r.eff.storageClassName != "" {
		storage["storageClass"] = r.eff.storageClassName
	}
	spec := map[string]any{
		"instances": int64(r.eff.replicas),
		"imageName": r.cnpgImage(),
		"storage":   storage,
		"bootstrap": map[string]any{"initdb": map[string]any{
			"database": owner,
			"owner":    owner,
			"secret":   map[string]any{"name": secretName(r.db.Name)},
		}},
	}
	if res := r.cnpgResources(); len(res) > 0 {
		spec["resources"] = res
	}
	if r.p.Topology != nil {
		r.wireTopology(spec)
	}
	if r.p.NodeMaintenance {
		// CloudNativePG drops the Cluster's PodDisruptionBudgets in a
		// maintenance window that reuses the volumes, the primary's too
		// when there is one instance (reconcilePodDisruptionBudget in
		// internal/controller/cluster_create.go, v1.30.0). reusePVC is
		// always true: an evicted instance waits for its own volume.
		spec["nodeMaintenanceWindow"] = map[string]any{"inProgress": true, "reusePVC": true}
	}
	meta := r.meta(r.db.Name)
	meta.Annotations[fleetv1alpha1.AnnotationGeneration] = strconv.FormatInt(r.db.Generation, 10)
	if r.p.Topology != nil && r.p.Topology.ReportRequest != "" {
		meta.Annotations[fleetv1alpha1.AnnotationReportRequest] = r.p.Topology.ReportRequest
	}
	u := NewCNPGCluster()
	u.SetName(meta.Name)
	u.SetNamespace(meta.Namespace)
	u.SetLabels(meta.Labels)
	u.SetAnnotations(meta.Annotations)
	u.Object["spec"] = spec
	return u
}

func (r renderer) cnpgResources() map[string]any {
	out := map[string]any{}
	res := r.resources()
	for key, list := range map[string]corev1.ResourceList{"requests": res.Requests, "limits": res.Limits} {
		if len(list) == 0 {
			continue
		}
		m := map[string]any{}
		for name, q := range list {
			m[string(name)] = q.String()
		}
		out[key] = m
	}
	return out
}

// cnpgStatus is the part of a CloudNativePG Cluster's status fleetdb reads.
type cnpgStatus struct {
	phase string
	// instances is spec.instances; reportedInstances status.instances.
	instances, reportedInstances int64
	readyInstances               int64
	currentPrimary               string
	// specImage is spec.imageName, image status.image: the image
	// CloudNativePG took from the spec for the instances.
	specImage, image string
	// ready is the Ready condition's status ("" without one), readyMessage its message.
	ready, readyMessage string
	// hibernated: the cnpg.io/hibernation condition is True with reason
	// Hibernated; hibernationReason is its reason ("" without one).
	hibernated        bool
	hibernationReason string
}

// tookSpec: CloudNativePG's status reflects the Cluster's spec as written.
//
// CloudNativePG sets no status.observedGeneration on a Cluster, nor an
// observedGeneration on its conditions (pkg/resources/status and
// internal/controller, v1.30.0, never write one): a healthy phase and a True
// Ready condition left from before a spec change say nothing about the
// change. What it does report from the spec it reconciled:
//   - status.image, the image it took from spec.imageName (reconcileImage
//     in internal/controller/cluster_image.go, status.SetImage) before it
//     rolls the instances to it, which ends with phase "Cluster in healthy
//     state" again;
//   - status.instances, the instances it found (PVC groups), which reach
//     spec.instances only once it created or removed them.
//
// A version change (the image) or a scale is therefore only counted once
// CloudNativePG took it. Other spec changes (resources, storage size) have
// no such echo in its status; they count once the Cluster is healthy, which
// CloudNativePG reports again only after it rolled the instances when it
// noticed them (phase "Upgrading cluster" meanwhile).
func (s cnpgStatus) tookSpec() bool {
	return s.reportedInstances == s.instances && (s.specImage == "" || s.image == s.specImage)
}

// healthy: CloudNativePG reports the Cluster healthy with every instance
// ready, and its Ready condition is not False.
func (s cnpgStatus) healthy() bool {
	return s.phase == cnpgHealthyPhase && s.readyInstances == s.instances && s.ready != "False"
}

func readCNPGStatus(u *unstructured.Unstructured) cnpgStatus {
	var s cnpgStatus
	s.phase, _, _ = unstructured.NestedString(u.Object, "status", "phase")
	s.instances, _, _ = unstructured.NestedInt64(u.Object, "spec", "instances")
	s.readyInstances, _, _ = unstructured.NestedInt64(u.Object, "status", "readyInstances")
	s.currentPrimary, _, _ = unstructured.NestedString(u.Object, "status", "currentPrimary")
	s.reportedInstances, _, _ = unstructured.NestedInt64(u.Object, "status", "instances")
	s.specImage, _, _ = unstructured.NestedString(u.Object, "spec", "imageName")
	s.image, _, _ = unstructured.NestedString(u.Object, "status", "image")
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		status, _ := m["status"].(string)
		switch m["type"] {
		case "Ready":
			s.ready = status
			s.readyMessage, _ = m["message"].(string)
		case cnpgHibernationCondition:
			s.hibernationReason, _ = m["reason"].(string)
			s.hibernated = status == "True" && s.hibernationReason == cnpgHibernationHibernated
		}
	}
	return s
}

// observeCNPG reports what the member runs for db from its CloudNativePG
// Cluster: Pending while there is none, Ready once CloudNativePG reports it
// healthy with every instance ready (and the client Service exists),
// Provisioning otherwise, with CloudNativePG's phase, the ready instances,
// the primary and its Ready condition's message.
func observeCNPG(ctx context.Context, c client.Reader, db *fleetv1alpha1.Database, st fleetv1alpha1.ClusterStatus) (fleetv1alpha1.ClusterStatus, error) {
	st.Backend = fleetv1alpha1.BackendCloudNativePG
	u := NewCNPGCluster()
	err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, u)
	switch {
	case apierrors.IsNotFound(err):
		st.Message = "the CloudNativePG Cluster does not exist yet"
		return st, nil
	case IsBackendMissing(err):
		return st, &BackendMissingError{Backend: fleetv1alpha1.BackendCloudNativePG}
	case err != nil:
		return st, fmt.Errorf("reading Cluster %s/%s: %w", db.Namespace, db.Name, err)
	case !ownedBy(u.GetLabels(), db.Namespace, db.Name):
		st.Message = fmt.Sprintf("Cluster %s/%s is not managed by fleetdb", db.Namespace, db.Name)
		return st, &ConflictError{Kind: "Cluster", Namespace: db.Namespace, Name: db.Name}
	}
	s := readCNPGStatus(u)
	st.Replicas, st.ReadyReplicas = int32(s.instances), int32(s.readyInstances)
	st.Primary = s.currentPrimary
	if image, _, _ := unstructured.NestedString(u.Object, "spec", "imageName"); image != "" {
		// The PostgreSQL version, without the image variant.
		st.Version, _, _ = strings.Cut(tagOf(image), "-")
	}
	endpoint, err := observeEndpoint(ctx, c, db)
	if err != nil {
		return st, err
	}
	st.Endpoint = endpoint

	st.Role = cnpgRole(u)
	pending, err := cnpgPendingCertificates(ctx, c, u)
	if err != nil {
		return st, err
	}
	// Healthy is not enough: CloudNativePG reports no generation (see tookSpec).
	caughtUp := s.healthy() && s.tookSpec()
	if caughtUp {
		st.ObservedGeneration, _ = strconv.ParseInt(u.GetAnnotations()[fleetv1alpha1.AnnotationGeneration], 10, 64)
	}
	switch {
	case u.GetDeletionTimestamp() != nil:
		st.Phase, st.Message = fleetv1alpha1.ClusterPhaseProvisioning, "the CloudNativePG Cluster is being deleted"
	case !caughtUp:
		st.Phase, st.Message = fleetv1alpha1.ClusterPhaseProvisioning, cnpgMessage(s)
	case endpoint == "":
		st.Phase, st.Message = fleetv1alpha1.ClusterPhaseProvisioning, "the client Service does not exist yet"
	case len(pending) > 0:
		st.Phase, st.Message = fleetv1alpha1.ClusterPhaseProvisioning, "waiting for CloudNativePG to take the renewed certificates in Secret "+
			strings.Join(pending, ", ")+" (the Cluster's status.secretsResourceVersion)"
	default:
		st.Phase = fleetv1alpha1.ClusterPhaseReady
	}
	st.Message = boundMessage(st.Message)
	return st, nil
}

// cnpgMessage says where a Cluster that is not ready yet stands.
func cnpgMessage(s cnpgStatus) string {
	phase := s.phase
	if phase == "" {
		phase = "no status yet"
	}
	msg := fmt.Sprintf("CloudNativePG: %s; %d of %d instances ready", phase, s.readyInstances, s.instances)
	if s.specImage != "" && s.image != "" && s.image != s.specImage {
		msg += "; image " + s.specImage + " not taken yet"
	}
	if s.currentPrimary != "" {
		msg += "; primary " + s.currentPrimary
	}
	if s.readyMessage != "" {
		msg += ": " + s.readyMessage
	}
	return msg
}

// boundMessage cuts a message to the API's bound, on a rune boundary (a
// message cut inside a UTF-8 character is refused by the API server).
func boundMessage(s string) string { return statusmsg.Truncate(s, maxMessage) }

// tagOf is the tag of an image reference ("" without one).
func tagOf(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[i+1:]
	}
	return ""
}

// CNPGTookCredentials reports whether CloudNativePG's Cluster for db took
// secret, the Database's credentials Secret as fleetdb last read it: the
// Cluster reports secret's resourceVersion as its application Secret's
// (status.secretsResourceVersion.applicationSecretVersion, which
// refreshSecretResourceVersions in internal/controller/cluster_status.go,
// v1.30.0, records at each reconcile; the instance manager then sets the
// owner role's password from that Secret on the primary, reconcileUser in
// internal/management/controller/instance_controller.go). Until then a new
// password is in the Secret, not in PostgreSQL. A missing Cluster has taken
// nothing.
func CNPGTookCredentials(ctx context.Context, c client.Reader, db *fleetv1alpha1.Database, secret *corev1.Secret) (bool, error) {
	if secret == nil {
		return false, nil
	}
	u := NewCNPGCluster()
	switch err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Name}, u); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading Cluster %s/%s: %w", db.Namespace, db.Name, err)
	}
	return CNPGSecretVersions(u)[secret.Name] == secret.ResourceVersion && secret.ResourceVersion != "", nil
}

// CNPGSecretVersions is what a Cluster reports of the Secrets fleetdb gives
// it: Secret name -> the resourceVersion CloudNativePG last reconciled
// (status.secretsResourceVersion: applicationSecretVersion for the
// bootstrap Secret, serverSecretVersion, serverCaSecretVersion,
// clientCaSecretVersion and replicationSecretVersion for the certificates;
// api/v1/cluster_types.go, v1.30.0). A certificate renewal has reached
// CloudNativePG once every renewed Secret's version is there.
func CNPGSecretVersions(u *unstructured.Unstructured) map[string]string {
	out := map[string]string{}
	put := func(name string, key string) {
		v, _, _ := unstructured.NestedString(u.Object, "status", "secretsResourceVersion", key)
		if name != "" && v != "" {
			out[name] = v
		}
	}
	for _, method := range []string{"initdb", "pg_basebackup", "recovery"} {
		name, _, _ := unstructured.NestedString(u.Object, "spec", "bootstrap", method, "secret", "name")
		put(name, "applicationSecretVersion")
	}
	for _, f := range cnpgCertificateVersions {
		name, _, _ := unstructured.NestedString(u.Object, "spec", "certificates", f.field)
		put(name, f.key)
	}
	return out
}

// cnpgCertificateVersions pairs each spec.certificates field with the key
// of status.secretsResourceVersion where CloudNativePG reports the version
// of that Secret it reconciled (refreshSecretResourceVersions,
// internal/controller/cluster_status.go, v1.30.0: ClientCASecretVersion,
// ReplicationSecretVersion, ServerCASecretVersion, ServerSecretVersion of
// the Secrets named in status.certificates, which are spec.certificates'
// for user-provided ones).
var cnpgCertificateVersions = []struct{ field, key string }{
	{"serverTLSSecret", "serverSecretVersion"}, {"serverCASecret", "serverCaSecretVersion"},
	{"clientCASecret", "clientCaSecretVersion"}, {"replicationTLSSecret", "replicationSecretVersion"},
}

// cnpgPendingCertificates are the certificate Secrets the Cluster names
// whose current version it does not report: a certificate written (renewed)
// since CloudNativePG last reconciled, which is not in use until it does
// (it reloads the instances' certificates at that reconcile). A member
// counts as renewed only once none is left. A key the Cluster reports no
// version for at all is not waited on: CloudNativePG reports every one at
// each reconcile, so that is a Cluster that never reconciled (not healthy
// yet, which holds the member anyway), or the kwok Stages, which cannot
// read a Secret's version.
func cnpgPendingCertificates(ctx context.Context, c client.Reader, u *unstructured.Unstructured) ([]string, error) {
	var pending []string
	for _, f := range cnpgCertificateVersions {
		name, _, _ := unstructured.NestedString(u.Object, "spec", "certificates", f.field)
		reported, _, _ := unstructured.NestedString(u.Object, "status", "secretsResourceVersion", f.key)
		if name == "" || reported == "" {
			continue
		}
		var s corev1.Secret
		switch err := c.Get(ctx, client.ObjectKey{Namespace: u.GetNamespace(), Name: name}, &s); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("reading Secret %s/%s: %w", u.GetNamespace(), name, err)
		}
		if s.ResourceVersion != reported && !slices.Contains(pending, name) {
			pending = append(pending, name)
		}
	}
	return pending, nil
}
