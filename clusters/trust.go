package clusters

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// Kubeconfigs and members are untrusted input: whoever can write a
// MemberCluster or its Secret, and whoever runs a member's API server, must
// not get the hub to read other Secrets, to send its credentials without TLS,
// or to hold an unbounded answer in memory; and nothing they control reaches a
// tenant's Database status.

const (
	// DefaultSecretNamespace is Options.SecretNamespace when unset.
	DefaultSecretNamespace = "fleetdb-system"
	// maxProbeBody bounds every answer to a probe (/readyz, /version, /api).
	maxProbeBody = 64 << 10
	// maxErrorBody bounds the body of every error answer from a member.
	maxErrorBody = 64 << 10
)

// secretKey returns the namespace and name of the member's kubeconfig Secret,
// or the problem when the reference leaves the hub's namespace: such a Secret
// is never read.
func (p *Provider) secretKey(ref fleetv1alpha1.SecretKeyRef) (ns string, problem *failure) {
	ns = ref.Namespace
	if ns == "" {
		ns = p.opts.SecretNamespace
	}
	if ns != p.opts.SecretNamespace {
		return "", &failure{
			reason: fleetv1alpha1.ReasonSecretNamespaceNotAllowed,
			message: fmt.Sprintf("kubeconfigSecretRef names a Secret in namespace %q; the hub reads kubeconfigs only from its own namespace %q",
				ref.Namespace, p.opts.SecretNamespace),
		}
	}
	return ns, nil
}

// checkKubeconfig is checkConnection on kubeconfig bytes; nil when they do not
// parse (restConfig says why).
func checkKubeconfig(data []byte, policy fleetv1alpha1.ConnectionPolicy) *failure {
	raw, err := clientcmd.Load(data)
	if err != nil {
		return nil
	}
	if err := checkConnection(raw, policy); err != nil {
		return &failure{reason: fleetv1alpha1.ReasonInsecureKubeconfig, message: err.Error()}
	}
	return nil
}

// checkConnection refuses a kubeconfig that weakens the connection to the
// member in a way policy does not allow: insecure-skip-tls-verify, a proxy-url,
// or a server that is not https. Every cluster entry is checked, not only the
// current context's: the kubeconfig is untrusted as a whole.
func checkConnection(raw *clientcmdapi.Config, policy fleetv1alpha1.ConnectionPolicy) error {
	for _, c := range raw.Clusters {
		if c.InsecureSkipTLSVerify && !policy.AllowInsecureSkipTLSVerify {
			return errors.New("kubeconfig sets insecure-skip-tls-verify; embed certificate-authority-data, " +
				"or set spec.connection.allowInsecureSkipTLSVerify on the MemberCluster")
		}
		if c.ProxyURL != "" && !policy.AllowProxyURL {
			return errors.New("kubeconfig sets a proxy-url; remove it, or set spec.connection.allowProxyURL on the MemberCluster")
		}
		u, err := url.Parse(c.Server)
		if err != nil {
			return errors.New("kubeconfig server is not a URL")
		}
		if u.Scheme != "https" && !policy.AllowHTTP {
			return fmt.Errorf("kubeconfig server scheme is %q, not https; use https, or set spec.connection.allowHTTP on the MemberCluster", u.Scheme)
		}
	}
	return nil
}

// policyKey folds the connection policy into the hash that decides whether a
// member's run is replaced: a changed opt-in is acted on like a changed
// kubeconfig.
func policyKey(policy fleetv1alpha1.ConnectionPolicy) []byte {
	return fmt.Appendf(nil, "\x00connection:%t,%t,%t", policy.AllowInsecureSkipTLSVerify, policy.AllowProxyURL, policy.AllowHTTP)
}

// boundedBodies limits what the hub reads of a member's answers: every error
// answer to maxErrorBody, and with all set every answer to limit. A longer
// body is cut short (reading it ends with errBodyTooLarge).
type boundedBodies struct {
	next  http.RoundTripper
	all   bool
	limit int64
}

// errBodyTooLarge ends the read of a member answer longer than allowed.
var errBodyTooLarge = errors.New("the member's answer is larger than the hub reads")

func (b boundedBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.next.RoundTrip(req)
	if err != nil || resp == nil || resp.Body == nil {
		return resp, err
	}
	if b.all || resp.StatusCode >= http.StatusBadRequest {
		resp.Body = &limitedBody{rc: resp.Body, left: b.limit}
	}
	return resp, nil
}

// limitedBody reads at most left bytes of rc, then fails.
type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// One more byte tells a body of exactly the limit from a longer one.
		var one [1]byte
		if n, _ := l.rc.Read(one[:]); n > 0 {
			return 0, errBodyTooLarge
		}
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.rc.Read(p)
	l.left -= int64(n)
	return n, err
}

func (l *limitedBody) Close() error { return l.rc.Close() }

// limitErrorBodies bounds every error answer of a member's clients.
func limitErrorBodies(rt http.RoundTripper) http.RoundTripper {
	return boundedBodies{next: rt, limit: maxErrorBody}
}

// limitAllBodies bounds every answer to a probe.
func limitAllBodies(rt http.RoundTripper) http.RoundTripper {
	return boundedBodies{next: rt, all: true, limit: maxProbeBody}
}

// tenantMessages are what a Database's status may say about a member that is
// not ready: fixed texts per reason, never an address, a certificate detail or
// a member's answer (those stay in the platform-visible MemberCluster status).
var tenantMessages = map[string]string{
	fleetv1alpha1.ReasonConnecting:                "the hub is connecting to the member",
	fleetv1alpha1.ReasonSecretNotFound:            "the member's registration is incomplete",
	fleetv1alpha1.ReasonSecretUnreadable:          "the hub cannot read the member's registration",
	fleetv1alpha1.ReasonInvalidKubeconfig:         "the member's registration is not usable",
	fleetv1alpha1.ReasonSecretNamespaceNotAllowed: "the member's registration is not usable",
	fleetv1alpha1.ReasonInsecureKubeconfig:        "the member's registration is not usable",
	fleetv1alpha1.ReasonUnauthorized:              "the member refuses the hub's credentials",
	fleetv1alpha1.ReasonUnreachable:               "the member's API server does not answer",
	fleetv1alpha1.ReasonTLSError:                  "the hub cannot establish a trusted connection to the member",
	fleetv1alpha1.ReasonNotReady:                  "the member's API server is not ready",
	fleetv1alpha1.ReasonProbeSucceeded:            messageReady,
}

// tenantMessage is the Health message for a condition: its reason's fixed text.
func tenantMessage(c condition) string {
	if m, ok := tenantMessages[c.reason]; ok {
		return m
	}
	if c.reason == "" {
		return ""
	}
	return "the member is not ready (" + c.reason + ")"
}
