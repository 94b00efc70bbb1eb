package realdb

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
	"github.com/fleetdb/fleetdb/test/e2e"
)

// The Job-backed steps of the real-node suite (issue 27): credential
// rotation, an on-demand backup and a restore into a new Database, a Retain
// delete and re-create, and the final backup on delete. Each proves its
// outcome with SQL run by a pod on the real node (sqlPod), never with status
// alone. They run on TestHubRunsCloudNativePGOnRealNodes's fleet and
// Database (written: each member's rows in table t, "b,<value>").

// sqlPod runs script with sh in a pod of the PostgreSQL image (which is
// also the image of fleetdb's Jobs on this backend), env from the given
// Secret keys (name → secret/key) and, when claim is set, that claim mounted
// read-only at /backups (then as the backup Jobs' user); it returns the pod's log and whether it succeeded.
// Passwords reach the pod from Secrets only, never its command line.
func sqlPod(ctx context.Context, t *testing.T, f *e2e.Fleet, m *e2e.Cluster, ns, name, image, script string,
	env map[string]string, secretEnv map[string][2]string, claim string) (string, bool) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "sql", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", script},
			}},
		},
	}
	c := &pod.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: "PGCONNECT_TIMEOUT", Value: "10"})
	for k, v := range env {
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: v})
	}
	for k, ref := range secretEnv {
		c.Env = append(c.Env, corev1.EnvVar{Name: k, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: ref[0]}, Key: ref[1],
		}}})
	}
	if claim != "" {
		// As the backup Jobs' user (uid 999, member/render.go runAsID):
		// the backups are theirs, 0700 (the scripts' umask 077).
		pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(999)), RunAsGroup: ptr.To(int64(999))}
		pod.Spec.Volumes = []corev1.Volume{{Name: "backups", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: true},
		}}}
		c.VolumeMounts = []corev1.VolumeMount{{Name: "backups", MountPath: "/backups", ReadOnly: true}}
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	err := m.Client.Create(cctx, pod)
	cancel()
	if err != nil {
		t.Fatalf("%s: creating pod %s: %v", m.Name, name, err)
	}
	var phase corev1.PodPhase
	for deadline := time.Now().Add(6 * time.Minute); ; {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := m.Client.Get(cctx, client.ObjectKeyFromObject(pod), pod)
		cancel()
		if err == nil {
			phase = pod.Status.Phase
			if phase == corev1.PodSucceeded || phase == corev1.PodFailed {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: pod %s did not finish (phase %q, err %v)", m.Name, name, phase, err)
		}
		time.Sleep(2 * time.Second)
	}
	out := kTry(ctx, f.Kubectl, m.Kubeconfig, "-n", ns, "logs", name)
	kTry(ctx, f.Kubectl, m.Kubeconfig, "-n", ns, "delete", "pod", name, "--wait=false")
	return out, phase == corev1.PodSucceeded
}

// readRows is the script that prints the rows of table t through the
// Database's client Service as the user of its credentials Secret. A
// Service just created may not be in kube-proxy's rules yet ("Network is
// unreachable": a real node's pods have no default route): it tries for a
// minute.
const readRows = `i=0
until out=$(psql -X -w -v ON_ERROR_STOP=1 -h "$HOST" -U "$PGUSER" -d "$PGUSER" -Atc "select 'rows: ' || string_agg(x, ',' order by x) from t" 2>&1); do
  i=$((i + 1))
  [ "$i" -lt 30 ] || { echo "$out"; exit 1; }
  sleep 2
done
echo "$out"`

// expectRows reads table t in member m through the client Service of
// Database db and fails unless it holds want.
func expectRows(ctx context.Context, t *testing.T, f *e2e.Fleet, m *e2e.Cluster, ns, db, image, podName, want string) {
	t.Helper()
	out, ok := sqlPod(ctx, t, f, m, ns, podName, image, readRows, map[string]string{"HOST": db + "." + ns + ".svc"},
		map[string][2]string{"PGUSER": {db + "-credentials", "username"}, "PGPASSWORD": {db + "-credentials", "password"}}, "")
	if !ok || !strings.Contains(out, "rows: "+want) {
		t.Fatalf("%s: %s through %s.%s.svc did not read the rows %q:\n%s", m.Name, podName, db, ns, want, out)
	}
}

// rotateOnRealNodes rotates the Database's password through the hub
// (docs/credentials.md) and proves with logins, in every member, that the
// new password opens the database (and reads its rows) and the old one no
// longer does: CloudNativePG reloads the Secret only for the cnpg.io/reload
// label (internal/controller/cluster_predicates.go, v1.30.0), and its
// instance manager sets the role's password on the primary.
func rotateOnRealNodes(ctx context.Context, t *testing.T, f *e2e.Fleet, key types.NamespacedName, image string, written map[string]string) {
	t.Helper()
	start := time.Now()
	secret := key.Name + "-credentials"
	for _, m := range f.Members {
		var s corev1.Secret
		if err := m.Client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: secret}, &s); err != nil {
			t.Fatal(err)
		}
		if s.Labels[member.CNPGReloadLabel] != "true" {
			t.Errorf("%s: the credentials Secret lacks %s=true: CloudNativePG would not reload it", m.Name, member.CNPGReloadLabel)
		}
		// The old password, kept for the check in a Secret of the test's.
		old := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "old-credentials"},
			Data:       map[string][]byte{"password": s.Data["password"]},
		}
		if err := m.Client.Create(ctx, old); err != nil {
			t.Fatal(err)
		}
	}
	// A rotation rewrites no Cluster and restarts no instance.
	before := clusterState(ctx, t, f, key)
	token := fmt.Sprintf("realdb-%d", time.Now().Unix())
	k := kubectl(ctx, t, f.Kubectl, f.Hub.Kubeconfig)
	// Fully qualified: kubectl resolved "database" to CloudNativePG's
	// databases.postgresql.cnpg.io once (a discovery cache of another
	// fleet's API server at the same address).
	res := "databases.fleetdb.io/" + key.Name
	k(time.Minute, "", "-n", key.Namespace, "annotate", res, fleetv1alpha1.AnnotationRotateCredentials+"="+token, "--overwrite")
	k(11*time.Minute, "", "-n", key.Namespace, "wait", res,
		"--for=jsonpath={.status.credentials.rotatedToken}="+token, "--timeout=10m")
	t.Logf("rotation %s: rotatedToken in the hub's status %s after the annotation", token, time.Since(start).Round(time.Second))

	// CloudNativePG sets the password asynchronously once it took the
	// Secret's version (which the hub waited for): try for up to 90 s.
	const check = `export PGHOST="$HOST" PGDATABASE="$PGUSER"
i=0
while :; do
  i=$((i + 1))
  new=$(PGPASSWORD="$NEW_PASSWORD" psql -X -w -Atc "select string_agg(x, ',' order by x) from t" 2>&1) && newok=yes || newok=no
  old=$(PGPASSWORD="$OLD_PASSWORD" psql -X -w -Atc "select 1" 2>&1) && oldok=yes || oldok=no
  if [ "$newok" = yes ] && [ "$oldok" = no ]; then
    echo "attempt $i: new password: rows $new"
    echo "attempt $i: old password: $old"
    exit 0
  fi
  if [ "$i" -ge 30 ]; then
    echo "attempt $i: new password logs in: $newok ($new); old password logs in: $oldok ($old)"
    exit 1
  fi
  sleep 3
done`
	for _, m := range f.Members {
		out, ok := sqlPod(ctx, t, f, m, key.Namespace, "rotated", image, check, map[string]string{"HOST": key.Name + "." + key.Namespace + ".svc"},
			map[string][2]string{
				"PGUSER":       {secret, "username"},
				"NEW_PASSWORD": {secret, "password"},
				"OLD_PASSWORD": {"old-credentials", "password"},
			}, "")
		if !ok || !strings.Contains(out, "new password: rows "+written[m.Name]) || !strings.Contains(out, "password authentication failed") {
			t.Fatalf("%s: after the rotation the new password must read the rows %q and the old one must be refused:\n%s", m.Name, written[m.Name], out)
		}
		t.Logf("%s: after the rotation:\n%s", m.Name, strings.TrimSpace(out))
	}
	if after := clusterState(ctx, t, f, key); after != before {
		t.Errorf("the rotation rewrote a Cluster or restarted an instance: before %s, after %s", before, after)
	}
	t.Logf("rotation proven in every member %s after the annotation", time.Since(start).Round(time.Second))
}

// clusterState is, for every member, the Cluster's generation and each
// instance pod's UID and restart count.
func clusterState(ctx context.Context, t *testing.T, f *e2e.Fleet, key types.NamespacedName) string {
	t.Helper()
	var b strings.Builder
	for _, m := range f.Members {
		u := member.NewCNPGCluster()
		if err := m.Client.Get(ctx, key, u); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s: generation %d;", m.Name, u.GetGeneration())
		var pods corev1.PodList
		if err := m.Client.List(ctx, &pods, client.InNamespace(key.Namespace), client.MatchingLabels{"cnpg.io/cluster": key.Name}); err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			restarts := int32(0)
			for _, c := range p.Status.ContainerStatuses {
				restarts += c.RestartCount
			}
			fmt.Fprintf(&b, " %s %s restarts %d;", p.Name, p.UID, restarts)
		}
		b.WriteString(" ")
	}
	return b.String()
}

// backupAndRestoreOnRealNodes takes an on-demand DatabaseBackup of the
// Database in every member and restores it into a new Database (one
// instance per member, deletionPolicy Retain for retainOnRealNodes); each
// member's restored Database reads the rows of that member's backup.
func backupAndRestoreOnRealNodes(ctx context.Context, t *testing.T, f *e2e.Fleet, key types.NamespacedName, version, image string,
	written map[string]string) types.NamespacedName {
	t.Helper()
	start := time.Now()
	b := &fleetv1alpha1.DatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "snap"},
		Spec:       fleetv1alpha1.DatabaseBackupSpec{DatabaseName: key.Name},
	}
	if err := f.Hub.Client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Minute); ; {
		err := f.Hub.Client.Get(ctx, client.ObjectKeyFromObject(b), b)
		if err == nil && (b.Status.Phase == fleetv1alpha1.BackupPhaseSucceeded || b.Status.Phase == fleetv1alpha1.BackupPhaseFailed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the DatabaseBackup did not end: %v %+v", err, b.Status)
		}
		time.Sleep(2 * time.Second)
	}
	if b.Status.Phase != fleetv1alpha1.BackupPhaseSucceeded || len(b.Status.Clusters) != len(f.Members) {
		t.Fatalf("the DatabaseBackup did not succeed in every member: %+v", b.Status)
	}
	for _, rec := range b.Status.Clusters {
		if rec.Phase != fleetv1alpha1.BackupPhaseSucceeded ||
			!strings.HasPrefix(rec.Location, "persistentvolumeclaim/"+member.BackupClaimName(key.Name)+":/backups/"+key.Namespace+"/"+key.Name+"/") {
			t.Fatalf("%s: backup record %+v", rec.Cluster, rec)
		}
		t.Logf("%s: on-demand backup %s at %s", rec.Cluster, rec.BackupID, rec.Location)
	}
	t.Logf("on-demand backup Succeeded in every member %s after its creation", time.Since(start).Round(time.Second))

	start = time.Now()
	dst := e2e.NewDatabase(key.Namespace, key.Name+"-copy", 1, f.MemberNames())
	dst.Spec.Version = version
	dst.Spec.Backend = fleetv1alpha1.BackendCloudNativePG
	dst.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyRetain
	dst.Spec.Backup = nil
	dst.Spec.RestoreFrom = &fleetv1alpha1.RestoreSource{BackupName: b.Name}
	if err := f.Hub.Client.Create(ctx, dst); err != nil {
		t.Fatal(err)
	}
	dkey := client.ObjectKeyFromObject(dst)
	watchRefusals(ctx, t, f, dkey)
	got := e2e.WaitForDatabaseReady(ctx, e2e.WaitForDatabaseReadyInput{
		T: t, Fleet: f, Key: dkey, Members: f.MemberNames(), Replicas: 1, Version: version,
	})
	if c := meta.FindStatusCondition(got.Status.Conditions, fleetv1alpha1.ConditionRestored); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("the restored Database is Ready but not Restored: %+v", c)
	}
	t.Logf("restored Database %s Ready and Restored %s after its creation", dkey.Name, time.Since(start).Round(time.Second))
	for _, m := range f.Members {
		expectRows(ctx, t, f, m, dkey.Namespace, dkey.Name, image, "restored", written[m.Name])
		t.Logf("%s: the restored Database reads the rows %q", m.Name, written[m.Name])
	}
	return dkey
}

// retainOnRealNodes deletes the Database with deletionPolicy Retain, checks
// that CloudNativePG's volume claims stay, creates the Database again under
// the same name, and reads the rows from the same claims.
func retainOnRealNodes(ctx context.Context, t *testing.T, f *e2e.Fleet, key types.NamespacedName, version, image string,
	written map[string]string) {
	t.Helper()
	start := time.Now()
	claims := map[string]types.UID{}
	claimName := key.Name + "-1" // CloudNativePG's first instance's claim
	for _, m := range f.Members {
		var pvc corev1.PersistentVolumeClaim
		if err := m.Client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: claimName}, &pvc); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		claims[m.Name] = pvc.UID
	}
	if err := f.Hub.Client.Delete(ctx, &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); err != nil {
		t.Fatal(err)
	}
	// Until both Clusters are gone: the reasons of their cnpg.io/hibernation
	// condition (docs/cloudnativepg.md), for the log.
	seen := map[string]map[string]bool{}
	for gone := 0; gone < len(f.Members); {
		gone = 0
		for _, m := range f.Members {
			u := member.NewCNPGCluster()
			err := m.Client.Get(ctx, key, u)
			if apierrors.IsNotFound(err) {
				gone++
				continue
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if c, ok := c.(map[string]any); ok && c["type"] == "cnpg.io/hibernation" {
					if seen[m.Name] == nil {
						seen[m.Name] = map[string]bool{}
					}
					seen[m.Name][fmt.Sprint(c["reason"])] = true
				}
			}
		}
		if time.Since(start) > f.Intervals.Delete {
			t.Fatalf("the Clusters are still there %s after a Retain delete", f.Intervals.Delete)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("Retain delete: the Clusters' cnpg.io/hibernation reasons seen before they went: %v", seen)
	e2e.DeleteDatabaseAndWait(ctx, e2e.DeleteDatabaseAndWaitInput{T: t, Fleet: f, Key: key})
	for _, m := range f.Members {
		var pvc corev1.PersistentVolumeClaim
		if err := m.Client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: claimName}, &pvc); err != nil {
			t.Fatalf("%s: the claim %s did not outlive a Retain delete: %v", m.Name, claimName, err)
		}
		if pvc.UID != claims[m.Name] || pvc.DeletionTimestamp != nil {
			t.Fatalf("%s: the claim %s was replaced or is being deleted", m.Name, claimName)
		}
	}
	t.Logf("Retain delete: Database gone, Clusters gone, claims kept %s after the delete", time.Since(start).Round(time.Second))

	start = time.Now()
	db := e2e.NewDatabase(key.Namespace, key.Name, 1, f.MemberNames())
	db.Spec.Version = version
	db.Spec.Backend = fleetv1alpha1.BackendCloudNativePG
	db.Spec.DeletionPolicy = fleetv1alpha1.DeletionPolicyRetain
	db.Spec.Backup = nil
	if err := f.Hub.Client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	e2e.WaitForDatabaseReady(ctx, e2e.WaitForDatabaseReadyInput{
		T: t, Fleet: f, Key: key, Members: f.MemberNames(), Replicas: 1, Version: version,
	})
	t.Logf("re-created Database %s Ready %s after its creation", key.Name, time.Since(start).Round(time.Second))
	for _, m := range f.Members {
		var pvc corev1.PersistentVolumeClaim
		if err := m.Client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: claimName}, &pvc); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if pvc.UID != claims[m.Name] {
			t.Fatalf("%s: the re-created Database's claim %s is a new one", m.Name, claimName)
		}
		expectRows(ctx, t, f, m, key.Namespace, key.Name, image, "retained", written[m.Name])
		t.Logf("%s: the re-created Database reads the rows %q from the kept claim %s", m.Name, written[m.Name], claimName)
	}
}

// finalBackupRecords deletes the Database and reads every state the hub
// stores of it until it goes (a watch from the version read before the
// delete, so no status write is missed between two looks): its final backup
// of every member must be recorded as ended, with the FinalBackup condition
// FinalBackupsTaken, before the finalizer lets it go. It returns that record.
func finalBackupRecords(ctx context.Context, t *testing.T, f *e2e.Fleet, db *fleetv1alpha1.Database) []fleetv1alpha1.BackupRecord {
	t.Helper()
	wc, err := client.NewWithWatch(f.Hub.Config, client.Options{Scheme: f.Hub.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, f.Intervals.Delete)
	defer cancel()
	w, err := wc.Watch(wctx, &fleetv1alpha1.DatabaseList{}, client.InNamespace(db.Namespace),
		client.MatchingFields{"metadata.name": db.Name}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: db.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := f.Hub.Client.Delete(ctx, db); err != nil {
		t.Fatal(err)
	}
	var last *fleetv1alpha1.Database
	for ev := range w.ResultChan() {
		d, ok := ev.Object.(*fleetv1alpha1.Database)
		if !ok {
			t.Fatalf("watching the Database: %+v", ev.Object)
		}
		if ev.Type == watch.Deleted {
			break
		}
		last = d
	}
	if last == nil || !apierrors.IsNotFound(f.Hub.Client.Get(ctx, client.ObjectKeyFromObject(db), &fleetv1alpha1.Database{})) {
		t.Fatalf("the Database did not go within %s (last seen %+v)", f.Intervals.Delete, last)
	}
	recs := last.Status.FinalBackups
	c := meta.FindStatusCondition(last.Status.Conditions, fleetv1alpha1.ConditionFinalBackup)
	if len(recs) != len(f.Members) || c == nil || c.Reason != fleetv1alpha1.ReasonFinalBackupsTaken {
		t.Fatalf("the Database went without recording its final backups (last state: %+v, condition %+v)", recs, c)
	}
	return recs
}

// expectFinalBackup reads the final backup the hub took before deleting the
// Database, on the member's backup claim where docs/backup.md says it is
// (/backups/<namespace>/<name>/final-<uid>/), and finds the rows in its
// pg_dump of the application database.
func expectFinalBackup(ctx context.Context, t *testing.T, f *e2e.Fleet, key types.NamespacedName, uid types.UID, image string,
	written map[string]string) {
	t.Helper()
	dir := fmt.Sprintf("/backups/%s/%s/final-%s", key.Namespace, key.Name, uid)
	script := `set -eu
cd "$DIR"
ls
cat manifest.json; echo
for d in db-*.dump; do pg_restore -f - --data-only -t t "$d"; done | sed -n '/^COPY/,/^\\\./p'`
	for _, m := range f.Members {
		out, ok := sqlPod(ctx, t, f, m, key.Namespace, "final-backup", image, script, map[string]string{"DIR": dir}, nil,
			member.BackupClaimName(key.Name))
		rows := strings.Split(written[m.Name], ",")
		if !ok || !strings.Contains(out, "manifest.json") || !strings.Contains(out, `"engine":"postgres"`) {
			t.Fatalf("%s: no final backup at %s on the claim %s:\n%s", m.Name, dir, member.BackupClaimName(key.Name), out)
		}
		for _, r := range rows {
			if !strings.Contains(out, "\n"+r+"\n") {
				t.Fatalf("%s: the final backup's dump of table t lacks the row %q:\n%s", m.Name, r, out)
			}
		}
		t.Logf("%s: the final backup at %s holds the rows:\n%s", m.Name, dir, strings.TrimSpace(out))
	}
}
