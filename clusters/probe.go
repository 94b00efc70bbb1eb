package clusters

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/internal/statusmsg"
)

// maxMessageLength bounds condition messages (the API allows 32768).
const maxMessageLength = 1024

// probeResult is the outcome of one probe.
type probeResult struct {
	version string
	err     *failure
	// backends the member offers; nil when discovery did not tell.
	backends []fleetv1alpha1.Backend
}

// probe asks the member's /readyz and /version within timeout.
func probe(ctx context.Context, rc rest.Interface, timeout time.Duration) probeResult {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var code int
	if err := rc.Get().AbsPath("/readyz").Do(ctx).StatusCode(&code).Error(); err != nil {
		f := classify(err, code)
		return probeResult{err: &f}
	}
	code = 0
	body, err := rc.Get().AbsPath("/version").Do(ctx).StatusCode(&code).Raw()
	if err != nil {
		f := classify(err, code)
		return probeResult{err: &f}
	}
	var info version.Info
	if err := json.Unmarshal(body, &info); err != nil {
		return probeResult{err: &failure{reason: fleetv1alpha1.ReasonNotReady, message: truncate("decoding /version: " + err.Error())}}
	}
	backends, _ := discoverBackends(ctx, rc)
	return probeResult{version: memberVersion(info.GitVersion), backends: backends}
}

// memberVersion is what the hub stores of a member's reported version: a
// member is not trusted, and its /version may say anything of any length
// (status.kubernetesVersion allows fleetv1alpha1.MaxKubernetesVersionLength).
func memberVersion(v string) string {
	return statusmsg.Truncate(strings.ToValidUTF8(v, ""), fleetv1alpha1.MaxKubernetesVersionLength)
}

// preflightAPI asks for /api, which unlike /readyz and /version needs an
// authenticated identity: an anonymous kubeconfig fails here, not later in
// every informer.
func preflightAPI(ctx context.Context, rc rest.Interface, timeout time.Duration) *failure {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var code int
	if err := rc.Get().AbsPath("/api").Do(ctx).StatusCode(&code).Error(); err != nil {
		f := classify(err, code)
		return &f
	}
	return nil
}

// readClusterID returns the member cluster's identity: the uid of its
// kube-system Namespace (the hub's identity in the member may get
// Namespaces: deploy/member).
func readClusterID(ctx context.Context, rc rest.Interface, timeout time.Duration) (string, *failure) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var code int
	body, err := rc.Get().AbsPath("/api/v1/namespaces/kube-system").Do(ctx).StatusCode(&code).Raw()
	if err != nil {
		f := classify(err, code)
		f.message = truncate("reading the kube-system Namespace (the cluster's identity): " + f.message)
		return "", &f
	}
	var ns struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &ns); err != nil || ns.Metadata.UID == "" {
		return "", &failure{reason: fleetv1alpha1.ReasonNotReady, message: "the member's kube-system Namespace has no uid"}
	}
	return ns.Metadata.UID, nil
}

// classify maps an error talking to a member (and the HTTP status code it
// answered with, 0 when it did not answer) to a condition reason.
func classify(err error, code int) failure {
	msg := truncate(err.Error())
	switch {
	case code == http.StatusUnauthorized || code == http.StatusForbidden ||
		apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
		return failure{reason: fleetv1alpha1.ReasonUnauthorized, message: msg}
	case isTLSError(err):
		return failure{reason: fleetv1alpha1.ReasonTLSError, message: msg}
	case code != 0:
		// It answered, with an error: it is there but not well.
		return failure{reason: fleetv1alpha1.ReasonNotReady, message: msg}
	default:
		// Connection refused, timeouts, DNS, resets: it did not answer.
		return failure{reason: fleetv1alpha1.ReasonUnreachable, message: msg}
	}
}

// isTLSError reports whether err comes from certificate verification or the
// TLS handshake.
func isTLSError(err error) bool {
	var (
		unknownAuthority x509.UnknownAuthorityError
		hostname         x509.HostnameError
		invalid          x509.CertificateInvalidError
		verification     *tls.CertificateVerificationError
		recordHeader     tls.RecordHeaderError
		alert            tls.AlertError
	)
	if errors.As(err, &unknownAuthority) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &verification) || errors.As(err, &recordHeader) || errors.As(err, &alert) {
		return true
	}
	// Some paths flatten the error into text.
	msg := err.Error()
	return strings.Contains(msg, "x509: ") || strings.Contains(msg, "tls: ")
}

// truncate bounds a message to maxMessageLength bytes.
func truncate(s string) string { return statusmsg.Truncate(s, maxMessageLength) }

// probeLoop probes the member of r every ProbeInterval until r ends. It skips
// ticks while a connect is in flight: the connect's preflight is a probe.
func (p *Provider) probeLoop(name string, r *run) {
	t := time.NewTicker(p.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		p.mu.RLock()
		connecting := r.connecting
		p.mu.RUnlock()
		if connecting {
			continue
		}
		p.recordProbe(name, r, probe(r.ctx, r.prober, p.opts.ProbeTimeout))
	}
}

// recordProbe folds one probe result into the member's state. A status pass
// is asked for only when the view changed; subscribers hear of engaged or
// Ready changes; a member that failed to connect and answers again is
// retried now rather than after its backoff.
func (p *Provider) recordProbe(name string, r *run, res probeResult) {
	if r.ctx.Err() != nil {
		return // a cancelled probe says nothing about the member
	}
	now := time.Now()
	p.mu.Lock()
	m := p.members[name]
	if m == nil || m.run != r {
		p.mu.Unlock()
		return
	}
	r.lastProbe = now
	retry := false
	if res.err == nil {
		if res.version != "" {
			r.version = res.version
		}
		if res.backends != nil {
			r.backends = res.backends
		}
		if !r.lastProbeOK && r.cl == nil && !r.connecting && r.connectErr != nil {
			r.nextAttempt, retry = now, true
		}
		r.failingSince, r.probeErr, r.lastProbeOK = time.Time{}, nil, true
	} else {
		if r.failingSince.IsZero() {
			r.failingSince = now
		}
		r.probeErr, r.lastProbeOK = res.err, false
	}
	changed, notify := m.refresh(now, p.opts.FailureGracePeriod)
	p.mu.Unlock()

	if changed || retry {
		p.enqueue(name)
	}
	if notify {
		p.notify(name)
	}
	if res.err != nil {
		// Every failing probe at V(1): the transition itself shows in the status.
		ctrl.LoggerFrom(r.ctx).V(1).Info("Member cluster probe failed", "reason", res.err.reason, "message", res.err.message)
	}
}
