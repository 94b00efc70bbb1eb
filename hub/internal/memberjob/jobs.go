package memberjob

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// List lists the Jobs in namespace that carry labels and this hub's
// identity and are not being deleted, oldest attempt first (the attempt in
// the attemptKey annotation; creation time breaks ties). what names them in errors.
func List(ctx context.Context, c client.Reader, namespace string, labels map[string]string, hubID, attemptKey, what string) ([]*batchv1.Job, error) {
	var list batchv1.JobList
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels(labels)); err != nil {
		return nil, fmt.Errorf("listing %s jobs: %w", what, err)
	}
	out := make([]*batchv1.Job, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil && Own(&list.Items[i], hubID) {
			out = append(out, &list.Items[i])
		}
	}
	slices.SortFunc(out, func(a, b *batchv1.Job) int {
		if d := AttemptOf(a, attemptKey) - AttemptOf(b, attemptKey); d != 0 {
			return d
		}
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	return out, nil
}

// AttemptOf is the attempt number a Job carries in its attemptKey
// annotation; 1 when missing or invalid.
func AttemptOf(j *batchv1.Job, attemptKey string) int {
	n, err := strconv.Atoi(j.Annotations[attemptKey])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// Own reports whether the Job carries this hub's identity (or none, with no identity set).
func Own(j *batchv1.Job, hubID string) bool {
	return j.Labels[fleetv1alpha1.LabelHubID] == hubID
}

// Succeeded reports a Job that completed.
func Succeeded(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// Failed reports a failed Job, since when and why (the Job controller's
// reason and message: no credential is in them).
func Failed(j *batchv1.Job) (bool, time.Time, string) {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			why := c.Reason
			if c.Message != "" {
				why += ": " + c.Message
			}
			return true, c.LastTransitionTime.Time, why
		}
	}
	return false, time.Time{}, ""
}

// Backoff is the wait after the given failed attempt of a Job: it doubles
// from base at each attempt, up to limit.
func Backoff(attempt int, base, limit time.Duration) time.Duration {
	d := base
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// SamePod reports whether got's pod runs what want's (the Job the hub
// renders) does: the same containers (name, image, command, arguments,
// working directory, environment, mounts) and volumes. Labels and names are
// no proof a Job is the hub's: whoever may create Jobs in the namespace can
// copy them (the hub identity is on objects any reader sees), and a Job
// running "true" completes for real. A Job that passes ran the hub's script
// on the hub's volumes, whoever created it.
func SamePod(got, want *batchv1.Job) bool {
	g, w := &got.Spec.Template.Spec, &want.Spec.Template.Spec
	return slices.EqualFunc(g.InitContainers, w.InitContainers, sameContainer) &&
		slices.EqualFunc(g.Containers, w.Containers, sameContainer) &&
		slices.EqualFunc(g.Volumes, w.Volumes, func(a, b corev1.Volume) bool {
			return a.Name == b.Name && apiequality.Semantic.DeepEqual(a.VolumeSource, b.VolumeSource)
		})
}

// sameContainer compares what decides what a container runs.
func sameContainer(a, b corev1.Container) bool {
	return a.Name == b.Name && a.Image == b.Image && slices.Equal(a.Command, b.Command) && slices.Equal(a.Args, b.Args) &&
		a.WorkingDir == b.WorkingDir && apiequality.Semantic.DeepEqual(a.Env, b.Env) &&
		apiequality.Semantic.DeepEqual(a.EnvFrom, b.EnvFrom) && apiequality.Semantic.DeepEqual(a.VolumeMounts, b.VolumeMounts)
}
