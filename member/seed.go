package member

import (
	"encoding/json"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// seed decides, for an object memo has no entry for (a restarted hub, or a
// reconnected member), whether the live object already holds what an apply
// would send, and if so remembers it as applied: no write is sent for it.
//
// The live object (a fresh read, or the member cache) must carry the applied
// hash of the same rendering (AnnotationAppliedHash, see appliedHash) and hold every value of
// the apply body, fleetdb's labels and annotations included (traceparent
// aside). Comparing the body to the live content, rather than trusting the
// managedFields of other managers, also catches a field someone removed
// (which leaves no managedFields entry behind); fields the API server
// defaulted, and fields of other managers that fleetdb does not render, are
// not in the body and do not count, as an apply would not touch them either.
// The hash says fleetdb's last apply rendered exactly this: an apply would
// drop no field that an older rendering set.
func (it *item) seed(memo *Memo) bool {
	if memo == nil || it.live == nil {
		return false
	}
	h, err := appliedHash(it.desired)
	if err != nil || it.live.GetAnnotations()[fleetv1alpha1.AnnotationAppliedHash] != h {
		return false
	}
	if !it.liveHoldsBody() {
		return false
	}
	memo.put(it.key, memoEntry{
		hash:            it.hash,
		version:         liveVersion(it.live),
		resourceVersion: it.live.GetResourceVersion(),
		database:        it.database(),
		uid:             it.live.GetUID(),
		generation:      it.live.GetGeneration(),
	})
	return true
}

// liveHoldsBody reports whether every value of the apply body is in the live object.
func (it *item) liveHoldsBody() bool {
	body, err := it.body()
	if err != nil {
		return false
	}
	content := body.Object
	delete(content, "apiVersion")
	delete(content, "kind")
	if meta, ok := content["metadata"].(map[string]any); ok {
		if a, ok := meta["annotations"].(map[string]any); ok {
			delete(a, fleetv1alpha1.AnnotationTraceparent)
		}
	}
	var live map[string]any
	if u, ok := it.live.(*unstructured.Unstructured); ok {
		live = u.Object
	} else if live, err = runtime.DefaultUnstructuredConverter.ToUnstructured(it.live); err != nil {
		return false
	}
	want, got := normalised(content), normalised(live)
	if want == nil || got == nil {
		return false
	}
	return holds(got, want)
}

// appliedHash is the AnnotationAppliedHash of a rendered object: its
// objectHash, with the values of a Secret's data left out (its keys kept), so
// that no hash of a password is shown where Secret data is not (describe,
// metadata-only reads). seed compares those values one by one.
func appliedHash(obj client.Object) (string, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return objectHash(obj)
	}
	s = s.DeepCopy()
	for k := range s.Data {
		s.Data[k] = nil
	}
	for k := range s.StringData {
		s.StringData[k] = ""
	}
	return objectHash(s)
}

// body is the server-side apply body Apply sends for the item, with the
// applied hash recorded.
func (it *item) body() (*unstructured.Unstructured, error) {
	h, err := appliedHash(it.desired)
	if err != nil {
		return nil, err
	}
	u, err := ApplyBody(it.desired, it.live)
	if err != nil {
		return nil, err
	}
	annotations := maps.Clone(u.GetAnnotations())
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[fleetv1alpha1.AnnotationAppliedHash] = h
	u.SetAnnotations(annotations)
	return u, nil
}

// database is "namespace/name" of the hub Database the item belongs to.
func (it *item) database() string {
	l := it.desired.GetLabels()
	return l[fleetv1alpha1.LabelDatabaseNamespace] + "/" + l[fleetv1alpha1.LabelDatabaseName]
}

// normalised round-trips v through JSON, so that numbers compare alike
// whatever Go type rendered them; nil when it cannot.
func normalised(v map[string]any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return nil
	}
	return out
}

// holds reports whether got holds every value of want: maps key by key (got
// may have more keys), lists element by element (same length), scalars
// equal. An empty map or list in want is held by a missing value.
func holds(got, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return len(w) == 0 && got == nil
		}
		for k, wv := range w {
			gv, present := g[k]
			if !present && !empty(wv) {
				return false
			}
			if present && !holds(gv, wv) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok {
			return len(w) == 0 && got == nil
		}
		if len(g) != len(w) {
			return false
		}
		for i := range w {
			if !holds(g[i], w[i]) {
				return false
			}
		}
		return true
	default:
		return got == want
	}
}

// empty reports whether v is an empty map or list.
func empty(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
}
