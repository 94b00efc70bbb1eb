package member

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// runAsID is the uid, gid and fsGroup of the database processes: the
// "postgres" and "mysql" users of the official images.
const runAsID int64 = 999

// Params is everything Render needs.
type Params struct {
	// Database is the hub object (name, namespace, uid, generation, spec).
	Database *fleetv1alpha1.Database
	// Cluster is the member cluster name; it selects the overrides.
	Cluster string
	// Credentials is the credentials Secret data (CredentialsUsernameKey,
	// CredentialsPasswordKey), the same in every member.
	Credentials map[string][]byte
	// ImageRepository optionally replaces DefaultImageRepository for air-gapped
	// fleets, e.g. "registry.local/library"; the image is "<repository>/<engine>:<version>".
	ImageRepository string
	// Traceparent is the optional W3C traceparent of the change; when set it is
	// stored as the AnnotationTraceparent annotation on every object.
	Traceparent string
	// Topology is the PrimaryStandby wiring of this member's CloudNativePG
	// Cluster (see Topology); nil for an Independent Database.
	Topology *Topology
	// InstanceTLS are the certificates of a postgres Database's instances
	// on the StatefulSet backend (see InstanceTLSSecretName); nil renders a
	// server without TLS (the hub always gives them: its rotation Job
	// refuses a server without).
	InstanceTLS *InstanceCertificates
	// NodeMaintenance renders a CloudNativePG Cluster with
	// nodeMaintenanceWindow {inProgress: true, reusePVC: true}: the
	// member's MemberCluster spec.nodeMaintenance.inProgress.
	NodeMaintenance bool
}

// CredentialsSecretName is the Secret with a Database's credentials: the
// hub keeps it in the Database's namespace, each member gets a copy of the
// same name.
func CredentialsSecretName(db string) string { return db + "-credentials" }

// Names of the member objects of a Database.
func secretName(db string) string    { return CredentialsSecretName(db) }
func configMapName(db string) string { return db + "-config" }
func headlessName(db string) string  { return db + "-hl" }

// Render returns the member objects of p.Database in apply order. For the
// CloudNativePG backend (Database.EffectiveBackend) see renderCNPG; for the
// StatefulSet backend: Namespace,
// credentials Secret, ConfigMap, client Service, headless Service,
// StatefulSet and, when more than one replica runs, a PodDisruptionBudget;
// a postgres Database with Params.InstanceTLS gets its TLS Secret after the
// credentials.
// Every object has its TypeMeta set. Render is pure; its errors never carry
// credential values.
//
// The Namespace is rendered bare but for LabelManagedNamespace: it may belong
// to the user, so Apply only creates it when missing and Teardown never
// deletes it.
func Render(p Params) ([]client.Object, error) {
	db := p.Database
	if db == nil {
		return nil, errors.New("render: no Database")
	}
	if db.Name == "" || db.Namespace == "" {
		return nil, errors.New("render: the Database has no name or namespace")
	}
	eng, err := engineFor(db.Spec.Engine)
	if err != nil {
		return nil, fmt.Errorf("render %s/%s: %w", db.Namespace, db.Name, err)
	}
	if err := checkCredentials(eng, p.Credentials); err != nil {
		return nil, fmt.Errorf("render %s/%s: %w", db.Namespace, db.Name, err)
	}
	if db.Spec.Storage.Size.Sign() <= 0 {
		return nil, fmt.Errorf("render %s/%s: spec.storage.size must be greater than 0", db.Namespace, db.Name)
	}

	r := renderer{p: p, db: db, eng: eng, eff: effectiveFor(db, p.Cluster)}
	if p.Topology != nil && db.EffectiveBackend() != fleetv1alpha1.BackendCloudNativePG {
		return nil, fmt.Errorf("render %s/%s: a PrimaryStandby topology needs the CloudNativePG backend", db.Namespace, db.Name)
	}
	if err := checkTopology(p.Topology); err != nil {
		return nil, fmt.Errorf("render %s/%s: %w", db.Namespace, db.Name, err)
	}
	if db.EffectiveBackend() == fleetv1alpha1.BackendCloudNativePG {
		if r.cnpgImage() == "" {
			return nil, fmt.Errorf("render %s/%s: no pinned CloudNativePG image for postgres %q: set spec.version to a major.minor release (such as 17.10)",
				db.Namespace, db.Name, db.EffectiveVersion())
		}
		return r.renderCNPG(), nil
	}
	if p.InstanceTLS != nil && !p.InstanceTLS.complete() {
		return nil, fmt.Errorf("render %s/%s: the instance certificates are incomplete", db.Namespace, db.Name)
	}
	objs := []client.Object{r.namespace(), r.secret()}
	if r.instanceTLS() {
		objs = append(objs, r.instanceTLSSecret())
	}
	objs = append(objs,
		r.configMap(),
		r.service(),
		r.headlessService(),
		r.statefulSet(),
	)
	if r.eff.replicas > 1 {
		objs = append(objs, r.podDisruptionBudget())
	}
	return objs, nil
}

// EffectiveReplicas is spec.replicas (at least 1) with the overrides for cluster applied.
func EffectiveReplicas(db *fleetv1alpha1.Database, cluster string) int32 {
	return effectiveFor(db, cluster).replicas
}

// effective holds the settings that overrides may change for one cluster.
type effective struct {
	replicas         int32
	resources        *fleetv1alpha1.ResourceSpec
	storageClassName string
}

// effectiveFor applies the overrides naming cluster, in order, to the spec.
// The CRD allows a cluster in one override only; should several match, the
// later one wins field by field.
func effectiveFor(db *fleetv1alpha1.Database, cluster string) effective {
	eff := effective{
		replicas:         max(db.Spec.Replicas, 1),
		resources:        db.Spec.Resources,
		storageClassName: db.Spec.Storage.StorageClassName,
	}
	for _, o := range db.Spec.Overrides {
		if cluster == "" || !contains(o.ClusterNames, cluster) {
			continue
		}
		if o.Replicas != nil {
			eff.replicas = max(*o.Replicas, 1)
		}
		if o.Resources != nil {
			eff.resources = o.Resources
		}
		if o.StorageClassName != nil {
			eff.storageClassName = *o.StorageClassName
		}
	}
	return eff
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func checkCredentials(eng engine, creds map[string][]byte) error {
	for _, key := range []string{CredentialsUsernameKey, CredentialsPasswordKey} {
		if len(creds[key]) == 0 {
			return fmt.Errorf("the credentials have no %q", key)
		}
	}
	return eng.checkCredentials(string(creds[CredentialsUsernameKey]))
}

// renderer builds the objects of one Database in one cluster.
type renderer struct {
	p   Params
	db  *fleetv1alpha1.Database
	eng engine
	eff effective
}

func typeMeta(gv schema.GroupVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: gv.String(), Kind: kind}
}

// meta is the metadata of every object but the Namespace. The traceparent
// annotation lives here, never on the pod template, where a change would
// restart the pods. The deletion policy is recorded so that leftovers
// collected after the hub object is gone are treated as it said. The hub
// generation is recorded on the StatefulSet only (see statefulSet): on every
// object it would make each spec change rewrite all of them.
func (r renderer) meta(name string) metav1.ObjectMeta {
	policy := r.db.Spec.DeletionPolicy
	if policy == "" {
		policy = fleetv1alpha1.DeletionPolicyDelete // the CRD's default
	}
	annotations := map[string]string{
		fleetv1alpha1.AnnotationDeletionPolicy: string(policy),
	}
	if r.p.Traceparent != "" {
		annotations[fleetv1alpha1.AnnotationTraceparent] = r.p.Traceparent
	}
	return metav1.ObjectMeta{
		Name:        name,
		Namespace:   r.db.Namespace,
		Labels:      objectLabels(r.db),
		Annotations: annotations,
	}
}

func (r renderer) namespace() *corev1.Namespace { return ManagedNamespace(r.db.Namespace) }

// ManagedNamespace is the Namespace fleetdb creates in a member for its
// Databases of namespace name: labelled as managed, nothing else.
func ManagedNamespace(name string) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta: typeMeta(corev1.SchemeGroupVersion, "Namespace"),
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			// The member's admission policy (deploy/member) lets the hub's
			// identity write only in namespaces that carry it.
			fleetv1alpha1.LabelManagedNamespace: fleetv1alpha1.ManagedByValue,
		}},
	}
}

func (r renderer) secret() *corev1.Secret {
	data := make(map[string][]byte, len(r.p.Credentials))
	for k, v := range r.p.Credentials {
		data[k] = append([]byte(nil), v...)
	}
	return &corev1.Secret{
		TypeMeta:   typeMeta(corev1.SchemeGroupVersion, "Secret"),
		ObjectMeta: r.meta(secretName(r.db.Name)),
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
}

func (r renderer) configMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   typeMeta(corev1.SchemeGroupVersion, "ConfigMap"),
		ObjectMeta: r.meta(configMapName(r.db.Name)),
		Data:       r.configData(),
	}
}

// configData is the ConfigMap's data: the server configuration and the
// engine's initialisation script, if any.
func (r renderer) configData() map[string]string {
	data := map[string]string{r.eng.configFile: r.config()}
	if r.eng.initScript != "" {
		data[initScriptKey] = r.eng.initScript
	}
	return data
}

func (r renderer) servicePorts() []corev1.ServicePort {
	return []corev1.ServicePort{{
		Name:       r.eng.name,
		Port:       r.eng.port,
		TargetPort: intstr.FromString(r.eng.name),
		Protocol:   corev1.ProtocolTCP,
	}}
}

func (r renderer) service() *corev1.Service {
	return r.clientService(podSelector(r.db), r.servicePorts())
}

// clientService is the client Service "<name>" over the pods of selector.
func (r renderer) clientService(selector map[string]string, ports []corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   typeMeta(corev1.SchemeGroupVersion, "Service"),
		ObjectMeta: r.meta(r.db.Name),
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Selector: selector, Ports: ports},
	}
}

// headlessService gives every instance a stable DNS name; it lists instances
// that are not ready yet so that they can find each other while starting.
func (r renderer) headlessService() *corev1.Service {
	return &corev1.Service{
		TypeMeta:   typeMeta(corev1.SchemeGroupVersion, "Service"),
		ObjectMeta: r.meta(headlessName(r.db.Name)),
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeClusterIP,
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 podSelector(r.db),
			Ports:                    r.servicePorts(),
		},
	}
}

func (r renderer) image() string {
	repo := strings.TrimSuffix(r.p.ImageRepository, "/")
	if repo == "" {
		repo = DefaultImageRepository
	}
	return repo + "/" + r.eng.name + ":" + r.db.EffectiveVersion()
}

func (r renderer) resources() corev1.ResourceRequirements {
	var res corev1.ResourceRequirements
	if r.eff.resources != nil {
		res.Requests = r.eff.resources.Requests.List()
		res.Limits = r.eff.resources.Limits.List()
	}
	return res
}

// config is the server configuration file's content.
func (r renderer) config() string {
	if r.instanceTLS() {
		return r.eng.config + postgresTLSConfig
	}
	return r.eng.config
}

// configHash changes when the rendered configuration does, and when the
// server certificate does; as a pod template annotation it rolls the pods
// so that they read the new configuration (PostgreSQL reads its
// certificate at start: a renewed one is served from the restart on).
func (r renderer) configHash() string {
	in := r.eng.configFile + "\x00" + r.config()
	if r.instanceTLS() {
		in += "\x00" + string(r.p.InstanceTLS.ServerCert)
	}
	sum := sha256.Sum256([]byte(in))
	return hex.EncodeToString(sum[:8])
}

func (r renderer) statefulSet() *appsv1.StatefulSet {
	labels := objectLabels(r.db)
	selector := podSelector(r.db)
	claim := corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: dataVolume, Labels: maps.Clone(labels)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: r.db.Spec.Storage.Size.DeepCopy()},
			},
		},
	}
	if r.eff.storageClassName != "" {
		claim.Spec.StorageClassName = ptrTo(r.eff.storageClassName)
	}
	// The generation tells Observe which hub generation the pods run.
	meta := r.meta(r.db.Name)
	meta.Annotations[fleetv1alpha1.AnnotationGeneration] = strconv.FormatInt(r.db.Generation, 10)
	return &appsv1.StatefulSet{
		TypeMeta:   typeMeta(appsv1.SchemeGroupVersion, "StatefulSet"),
		ObjectMeta: meta,
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptrTo(r.eff.replicas),
			ServiceName:         headlessName(r.db.Name),
			Selector:            &metav1.LabelSelector{MatchLabels: selector},
			PodManagementPolicy: appsv1.OrderedReadyPodManagement,
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
			// Teardown decides about the volumes, never the StatefulSet controller.
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      labels,
					Annotations: map[string]string{fleetv1alpha1.AnnotationConfigHash: r.configHash()},
				},
				Spec: r.podSpec(selector),
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{claim},
		},
	}
}

func (r renderer) podSpec(selector map[string]string) corev1.PodSpec {
	container := r.eng.container(r.image(), secretName(r.db.Name), r.p.Credentials, r.resources())
	volumes := []corev1.Volume{{
		Name: configVolume,
		VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: configMapName(r.db.Name)},
		}},
	}}
	if r.instanceTLS() {
		container.VolumeMounts = append(container.VolumeMounts, instanceTLSVolumeMount())
		volumes = append(volumes, instanceTLSVolumeOf(r.db.Name, TLSCertKey, TLSKeyKey))
	}
	return corev1.PodSpec{
		// The database never talks to the Kubernetes API, and Service
		// environment variables (e.g. MYSQL_PORT for a Service "mysql")
		// confuse the images' entrypoints.
		AutomountServiceAccountToken: ptrTo(false),
		EnableServiceLinks:           ptrTo(false),
		SecurityContext:              podSecurityContext(),
		// Spread the instances over nodes where the scheduler can.
		Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
				Weight: 100,
				PodAffinityTerm: corev1.PodAffinityTerm{
					LabelSelector: &metav1.LabelSelector{MatchLabels: maps.Clone(selector)},
					TopologyKey:   corev1.LabelHostname,
				},
			}},
		}},
		Containers: []corev1.Container{container},
		Volumes:    volumes,
	}
}

func (r renderer) podDisruptionBudget() *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   typeMeta(policyv1.SchemeGroupVersion, "PodDisruptionBudget"),
		ObjectMeta: r.meta(r.db.Name),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptrTo(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: podSelector(r.db)},
		},
	}
}

// jobRenderer is the renderer of a Job that runs db's engine client in
// cluster (rotation, backup, restore) and the script it runs (from
// scriptFor), with errors named by what.
func jobRenderer(db *fleetv1alpha1.Database, cluster, imageRepository, what string,
	scriptFor func(fleetv1alpha1.Engine) (string, error)) (renderer, string, error) {
	eng, err := engineFor(db.Spec.Engine)
	if err != nil {
		return renderer{}, "", fmt.Errorf("%s %s/%s: %w", what, db.Namespace, db.Name, err)
	}
	script, err := scriptFor(db.Spec.Engine)
	if err != nil {
		return renderer{}, "", err
	}
	r := renderer{p: Params{Database: db, Cluster: cluster, ImageRepository: imageRepository}, db: db, eng: eng, eff: effectiveFor(db, cluster)}
	return r, script, nil
}

// clientImage is the image with the engine's client tools: the engine's
// image, or CloudNativePG's operand image on that backend.
func (r renderer) clientImage() string {
	if r.db.EffectiveBackend() == fleetv1alpha1.BackendCloudNativePG {
		return r.cnpgImage()
	}
	return r.image()
}
