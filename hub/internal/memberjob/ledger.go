package memberjob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// The ledger bounds: a ConfigMap holds 1 MiB, an entry about 300 bytes.
const (
	// maxLedgerEntries: when full, the oldest entry goes. A Job whose entry
	// went is trusted only when its pod is still the one the hub renders
	// (SamePod) and is never deleted by the hub: it is kept, not lost.
	maxLedgerEntries = 2000
	// maxPodsPerJob: the pods recorded at one Job name (a Job created
	// again at that name after a spec change).
	maxPodsPerJob = 4
)

// Ledger is the hub's own record, in the JobsConfigMap of the hub
// namespace, of the Jobs it creates in members: for each (member,
// namespace, name) the pods (PodHash) it created there. It is written
// before the Job is created, so no Job of the hub's is ever missing from it
// (a crash between the two leaves an entry of a Job never created: a Job
// that later appears at that name is trusted only if it runs that very pod,
// the hub's). A member cannot write it, so unlike labels and annotations on
// the Job it tells the hub's Jobs from anyone else's:
//   - a Job of the hub's stays trusted after the spec it was rendered from
//     changed (its pod is no longer what the hub renders now, but it is
//     what the hub rendered then), so a rotation, restore or backup waits
//     for it or retries after it instead of stalling;
//   - the hub deletes only Jobs the ledger holds (Spec.Remove): never one
//     it did not create.
//
// Reads are live (the hub caches no ConfigMaps); writes are serialised in
// the process and optimistic on the server. A nil Ledger records nothing
// and holds nothing.
type Ledger struct {
	Client    client.Client
	Live      client.Reader
	Namespace string
	mu        sync.Mutex
}

// ledgerEntry is one Job name's record.
type ledgerEntry struct {
	// Job is "<member>/<namespace>/<name>" (for people reading the ConfigMap).
	Job string `json:"job"`
	// Pods are the PodHash of each Job the hub created at that name, newest last.
	Pods     []string  `json:"pods"`
	Recorded time.Time `json:"recorded"`
}

// ledgerKey is the ConfigMap key of a Job: a hash, since the member,
// namespace and name together may exceed a key's 253 characters.
func ledgerKey(hubID, cluster string, j *batchv1.Job) (key, job string) {
	job = cluster + "/" + j.Namespace + "/" + j.Name
	sum := sha256.Sum256([]byte(hubID + "/" + job))
	return hex.EncodeToString(sum[:]), job
}

// PodHash is a digest of what SamePod compares: a Job with another hash
// runs something else.
func PodHash(j *batchv1.Job) string {
	type container struct {
		Name, Image, WorkingDir string
		Command, Args           []string
		Env                     []corev1.EnvVar
		EnvFrom                 []corev1.EnvFromSource
		VolumeMounts            []corev1.VolumeMount
	}
	prints := func(cs []corev1.Container) []container {
		out := make([]container, 0, len(cs))
		for _, c := range cs {
			out = append(out, container{Name: c.Name, Image: c.Image, WorkingDir: c.WorkingDir, Command: c.Command, Args: c.Args,
				Env: c.Env, EnvFrom: c.EnvFrom, VolumeMounts: c.VolumeMounts})
		}
		return out
	}
	pod := &j.Spec.Template.Spec
	b, err := json.Marshal(struct {
		Init, Containers []container
		Volumes          []corev1.Volume
	}{prints(pod.InitContainers), prints(pod.Containers), pod.Volumes})
	if err != nil {
		return "" // never: these types always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Record notes that the hub is about to create job in cluster (before the create).
func (l *Ledger) Record(ctx context.Context, hubID, cluster string, job *batchv1.Job) error {
	if l == nil {
		return nil
	}
	key, name := ledgerKey(hubID, cluster, job)
	pod := PodHash(job)
	return l.change(ctx, func(all map[string]ledgerEntry) bool {
		e := all[key]
		if slices.Contains(e.Pods, pod) {
			return false
		}
		e.Job, e.Recorded = name, time.Now().UTC()
		e.Pods = append(e.Pods, pod)
		e.Pods = e.Pods[max(0, len(e.Pods)-maxPodsPerJob):]
		all[key] = e
		for len(all) > maxLedgerEntries {
			oldest := key
			for k, o := range all {
				if o.Recorded.Before(all[oldest].Recorded) {
					oldest = k
				}
			}
			ctrl.LoggerFrom(ctx).Info("job ledger full: forgetting the oldest entry; that Job is no longer deleted by the hub",
				"job", all[oldest].Job)
			delete(all, oldest)
		}
		return true
	})
}

// Holds reports whether the hub created job in cluster: the ledger has the
// Job's name with the pod it runs.
func (l *Ledger) Holds(ctx context.Context, hubID, cluster string, job *batchv1.Job) (bool, error) {
	if l == nil {
		return false, nil
	}
	all, _, err := l.read(ctx)
	if err != nil {
		return false, err
	}
	key, _ := ledgerKey(hubID, cluster, job)
	return slices.Contains(all[key].Pods, PodHash(job)), nil
}

// Forget drops the entries of jobs (deleted by the hub).
func (l *Ledger) Forget(ctx context.Context, hubID, cluster string, jobs ...*batchv1.Job) error {
	if l == nil || len(jobs) == 0 {
		return nil
	}
	return l.change(ctx, func(all map[string]ledgerEntry) bool {
		changed := false
		for _, j := range jobs {
			key, _ := ledgerKey(hubID, cluster, j)
			if _, ok := all[key]; ok {
				delete(all, key)
				changed = true
			}
		}
		return changed
	})
}

// Remove deletes those of jobs in cluster the hub created, and their pods:
// the ones the ledger holds (a nil Ledger: those unledgered says were).
// Any other Job is left alone, whatever its name and labels: the hub never
// deletes a Job it did not create. nil, NotFound and Jobs being deleted are
// done; what names the kind in logs and errors.
func (l *Ledger) Remove(ctx context.Context, c client.Client, hubID, cluster, what string, unledgered func(*batchv1.Job) (bool, error),
	jobs ...*batchv1.Job) error {
	var gone []*batchv1.Job
	for _, j := range jobs {
		if j == nil || j.DeletionTimestamp != nil {
			continue
		}
		created, err := l.created(ctx, hubID, cluster, j, unledgered)
		if err != nil {
			return err
		}
		if !created {
			ctrl.LoggerFrom(ctx).Info("left a "+what+" job the hub did not create", "job", j.Name)
			continue
		}
		if err := c.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s job %s: %w", what, j.Name, err)
		}
		gone = append(gone, j)
	}
	return l.Forget(ctx, hubID, cluster, gone...)
}

func (l *Ledger) created(ctx context.Context, hubID, cluster string, j *batchv1.Job, unledgered func(*batchv1.Job) (bool, error)) (bool, error) {
	if l == nil {
		return unledgered(j)
	}
	return l.Holds(ctx, hubID, cluster, j)
}

// read returns the entries and the ConfigMap (nil when there is none).
func (l *Ledger) read(ctx context.Context) (map[string]ledgerEntry, *corev1.ConfigMap, error) {
	var cm corev1.ConfigMap
	err := l.Live.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: fleetv1alpha1.JobsConfigMap}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		return map[string]ledgerEntry{}, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading the job ledger: %w", err)
	}
	all := make(map[string]ledgerEntry, len(cm.Data))
	for k, raw := range cm.Data {
		var e ledgerEntry
		if err := json.Unmarshal([]byte(raw), &e); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "ignoring an unreadable job ledger entry", "key", k)
			continue
		}
		all[k] = e
	}
	return all, &cm, nil
}

// change applies edit (false: nothing changed) and writes the ledger back.
func (l *Ledger) change(ctx context.Context, edit func(map[string]ledgerEntry) bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		all, cm, err := l.read(ctx)
		if err != nil || !edit(all) {
			return err
		}
		data := make(map[string]string, len(all))
		for k, e := range all {
			b, err := json.Marshal(e)
			if err != nil {
				return err
			}
			data[k] = string(b)
		}
		if cm == nil {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: fleetv1alpha1.JobsConfigMap,
				Labels: map[string]string{fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue}}, Data: data}
			err = l.Client.Create(ctx, cm, client.FieldOwner(fleetv1alpha1.FieldManager))
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), cm.Name, err) // another replica made it: read it
			}
		} else {
			cm.Data = data
			err = l.Client.Update(ctx, cm, client.FieldOwner(fleetv1alpha1.FieldManager))
		}
		if err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("writing the job ledger: %w", err)
		}
		return err
	})
}
