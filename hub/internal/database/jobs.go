package database

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ownJobs lists the Jobs in namespace that carry labels and this hub's
// identity and are not being deleted, oldest attempt first (the attempt in
// the attemptKey annotation; creation time breaks ties). what names them in errors.
func ownJobs(ctx context.Context, c client.Reader, namespace string, labels map[string]string, hubID, attemptKey, what string) ([]*batchv1.Job, error) {
	var list batchv1.JobList
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels(labels)); err != nil {
		return nil, fmt.Errorf("listing %s jobs: %w", what, err)
	}
	out := make([]*batchv1.Job, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil && ownJob(&list.Items[i], hubID) {
			out = append(out, &list.Items[i])
		}
	}
	slices.SortFunc(out, func(a, b *batchv1.Job) int {
		if d := attemptOf(a, attemptKey) - attemptOf(b, attemptKey); d != 0 {
			return d
		}
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	return out, nil
}

// attemptOf is the attempt number a Job carries in its attemptKey
// annotation; 1 when missing or invalid.
func attemptOf(j *batchv1.Job, attemptKey string) int {
	n, err := strconv.Atoi(j.Annotations[attemptKey])
	if err != nil || n < 1 {
		return 1
	}
	return n
}
