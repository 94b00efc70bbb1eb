package hub

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
)

// request builds a multicluster request for a Database key in a cluster ("" is the hub).
func request(cluster string, key types.NamespacedName) mcreconcile.Request {
	return mcreconcile.Request{
		ClusterName: multicluster.ClusterName(cluster),
		Request:     reconcile.Request{NamespacedName: key},
	}
}

func metav1Time(t time.Time) metav1.Time {
	return metav1.NewTime(t.Truncate(time.Second))
}
