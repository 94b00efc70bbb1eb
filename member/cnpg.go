package member

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// DefaultCNPGImageRepository is where CloudNativePG's postgres operand images
// come from when Params.ImageRepository is empty; the image is
// "<repository>/postgresql:<major version>".
const DefaultCNPGImageRepository = "ghcr.io/cloudnative-pg"

// CloudNativePG's labels and annotations that fleetdb reads or writes.
const (
	// cnpgClusterLabel names the Cluster on its pods and volume claims.
	cnpgClusterLabel = "cnpg.io/cluster"
	// cnpgInstanceRoleLabel is "primary" on the primary's pod.
	cnpgInstanceRoleLabel = "cnpg.io/instanceRole"
	// cnpgHibernationAnnotation set to "on" makes CloudNativePG stop every
	// instance and keep the volume claims.
	cnpgHibernationAnnotation = "cnpg.io/hibernation"
	// cnpgHibernationCondition is True once every instance has stopped.
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

func (r renderer) basicAuthSecret() *corev1.Secret {
	s := r.secret()
	s.Type = corev1.SecretTypeBasicAuth
	return s
}

// primaryService is the client Service "<name>": the primary, like CloudNativePG's "<name>-rw".
func (r renderer) primaryService() *corev1.Service {
	return r.clientService(
		map[string]string{cnpgClusterLabel: r.db.Name, cnpgInstanceRoleLabel: "primary"},
		[]corev1.ServicePort{{Name: "postgres", Port: cnpgPort, TargetPort: intstr.FromInt32(cnpgPort), Protocol: corev1.ProtocolTCP}},
	)
}

// cnpgImage is CloudNativePG's operand image for the major version.
func (r renderer) cnpgImage() string {
	repo := strings.TrimSuffix(r.p.ImageRepository, "/")
	if repo == "" {
		repo = DefaultCNPGImageRepository
	}
	major, _, _ := strings.Cut(r.db.EffectiveVersion(), ".")
	return repo + "/postgresql:" + major
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
	meta := r.meta(r.db.Name)
	meta.Annotations[fleetv1alpha1.AnnotationGeneration] = strconv.FormatInt(r.db.Generation, 10)
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
	phase          string
	instances      int64
	readyInstances int64
	currentPrimary string
	// ready is the Ready condition's status ("" without one), readyMessage its message.
	ready, readyMessage string
	// readyGeneration is the Ready condition's observedGeneration (0 when unset).
	readyGeneration int64
	hibernated      bool
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
			s.readyGeneration, _, _ = unstructured.NestedInt64(m, "observedGeneration")
		case cnpgHibernationCondition:
			s.hibernated = status == "True"
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
		st.Version = tagOf(image)
	}
	endpoint, err := observeEndpoint(ctx, c, db)
	if err != nil {
		return st, err
	}
	st.Endpoint = endpoint

	st.Role = cnpgRole(u)
	healthy := s.healthy()
	// CloudNativePG's Ready condition may carry the generation it judged; a
	// Ready from before the last spec change says nothing about it.
	caughtUp := healthy && (s.readyGeneration == 0 || s.readyGeneration >= u.GetGeneration())
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
	if s.currentPrimary != "" {
		msg += "; primary " + s.currentPrimary
	}
	if s.readyMessage != "" {
		msg += ": " + s.readyMessage
	}
	return msg
}

// boundMessage cuts a message to the API's bound.
func boundMessage(s string) string {
	if len(s) > maxMessage {
		return s[:maxMessage]
	}
	return s
}

// tagOf is the tag of an image reference ("" without one).
func tagOf(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[i+1:]
	}
	return ""
}
