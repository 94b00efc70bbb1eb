package clusters

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// cnpgAPIPath is the discovery document of CloudNativePG's API group version.
const cnpgAPIPath = "/apis/postgresql.cnpg.io/v1"

// discoverBackends asks the member which Database backends it offers: the
// StatefulSet backend always; CloudNativePG when the member serves its
// Cluster API (its CRDs are installed). One GET per probe, a read: a fleet
// at rest writes nothing. known is false when the member did not answer
// clearly (the previous answer stands).
func discoverBackends(ctx context.Context, rc rest.Interface) (backends []fleetv1alpha1.Backend, known bool) {
	backends = []fleetv1alpha1.Backend{fleetv1alpha1.BackendStatefulSet}
	var code int
	body, err := rc.Get().AbsPath(cnpgAPIPath).Do(ctx).StatusCode(&code).Raw()
	switch {
	case code == http.StatusNotFound:
		return backends, true
	case err != nil:
		return nil, false
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, false
	}
	if slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "clusters" }) {
		backends = append(backends, fleetv1alpha1.BackendCloudNativePG)
	}
	slices.Sort(backends)
	return backends, true
}

// Offers reports whether the member offers backend, as its last probe
// discovered it; known is false before a probe has told.
func (p *Provider) Offers(name string, backend fleetv1alpha1.Backend) (offered, known bool) {
	h := p.Health(name)
	if h.Backends == nil {
		return false, false
	}
	return slices.Contains(h.Backends, backend), true
}
