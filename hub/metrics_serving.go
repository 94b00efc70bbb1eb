package hub

import (
	"crypto/tls"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The secure metrics endpoint asks the hub's API server who a scraper is and
// whether it may get /metrics.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// metricsOptions serve the metrics endpoint. With cfg.MetricsSecure it is
// HTTPS, and every scrape is authenticated (a TokenReview of its bearer
// token) and authorized (a SubjectAccessReview of "get" on the non-resource
// URL /metrics) by the hub's API server, as kubebuilder's scaffold does
// (controller-runtime v0.24.1, pkg/metrics/filters/filters.go): a scrape
// without a token is answered 401, one whose identity may not get /metrics
// 403. The hub's own identity needs to create TokenReviews and
// SubjectAccessReviews for that (the markers below); a scraper needs
// deploy/rbac's ClusterRole fleetdb-hub-metrics-reader. The serving
// certificate is read from cfg.MetricsCertDir (tls.crt, tls.key, reloaded
// when they change) or, when that holds none, generated self-signed at
// start. HTTP/2 is off (HTTP/2 rapid reset, CVE-2023-44487; kubebuilder's
// scaffold turns it off too). Without MetricsSecure the endpoint is plain
// HTTP and open to whoever reaches it: local runs and tests only.
func metricsOptions(cfg Config) metricsserver.Options {
	o := metricsserver.Options{BindAddress: orDisabled(cfg.MetricsAddr)}
	if cfg.MetricsSecure {
		o.SecureServing = true
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
		o.CertDir = cfg.MetricsCertDir
		o.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}
	return o
}
