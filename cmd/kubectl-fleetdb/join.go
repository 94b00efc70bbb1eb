package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	memberdeploy "github.com/fleetdb/fleetdb/deploy/member"
)

// Labels join puts on the kubeconfig Secret on the hub; unjoin deletes only
// a Secret that carries them.
const (
	labelPartOf        = "app.kubernetes.io/part-of"
	labelMemberCluster = "fleetdb.io/member-cluster"
)

// joinOptions are join's flags.
type joinOptions struct {
	*options
	name             string
	memberKubeconfig string
	memberContext    string
	// allowInsecure accepts a member kubeconfig with insecure-skip-tls-verify
	// (spec.connection.allowInsecureSkipTLSVerify's counterpart).
	allowInsecure   bool
	server          string
	labels          string
	allNamespaces   bool
	namespaceLabels string
	replicationHost string
	replicationPort int32
	timeout         secondsOrDuration
	wait            bool
	// noNamespaceSelector clears the namespace selector join set.
	noNamespaceSelector bool
	// given are the tenancy and replication flags on the command line:
	// only those change the registration; the settings of an earlier
	// join that are not given again are kept.
	given map[string]bool
}

// flagAllowInsecure accepts a member kubeconfig that skips TLS verification.
const (
	flagAllowInsecure  = "allow-insecure-skip-tls-verify"
	allowInsecureUsage = "accept a --member-kubeconfig with insecure-skip-tls-verify (the member's identity is then not checked: " +
		"join hands your admin credentials to, and takes the hub's token and CA from, whatever answers; as the hub's spec.connection.allowInsecureSkipTLSVerify)"
)

// The flags that set a part of the registration.
const (
	flagLabels              = "labels"
	flagAllNamespaces       = "all-namespaces"
	flagNamespaceLabels     = "namespace-labels"
	flagNoNamespaceSelector = "no-namespace-selector"
	flagReplicationHost     = "replication-host-template"
	flagReplicationPort     = "replication-port"
)

func newJoinCommand(o *options) *cobra.Command {
	j := &joinOptions{options: o, replicationPort: fleetv1alpha1.DefaultReplicationPort, timeout: secondsOrDuration(2 * time.Minute), wait: true}
	cmd := &cobra.Command{
		Use:   "join NAME --member-kubeconfig FILE [--server URL] [--labels k=v,...]",
		Short: "Join a member cluster to the hub (idempotent)",
		Long: `join installs the hub's identity in the member (deploy/member: the ServiceAccount
fleetdb-hub-agent, its least-privilege ClusterRole and admission policy, a
long-lived token), waits for the token, writes a kubeconfig for that identity on
the hub as Secret <hub-namespace>/NAME-kubeconfig, applies the MemberCluster NAME
and waits until the hub reports it Ready.

Run it again to hand the hub a rotated token, or to change labels, the namespace
selector or the replication address: only the flags given change the
registration, and what an earlier join set and is not given again is kept
(labels, namespace selector, replication address; labels others set and a
cordon are never join's). --labels gives the exact set of join's labels
(--labels "" removes them), --no-namespace-selector removes the namespace
selector, --replication-host-template "" removes the replication address.
Nothing is written to your kubeconfigs.

--server is the member's API address as the hub reaches it (default: the server
of the member kubeconfig's context); on kind it is https://<cluster>-control-plane:6443.
Without --all-namespaces or --namespace-labels no hub namespace may place
Databases on the member until a platform admin sets spec.namespaceSelector.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("join takes one member NAME")
			}
			if len(args) == 1 {
				if j.name != "" && j.name != args[0] {
					return usagef("NAME %q and --name %q differ", args[0], j.name)
				}
				j.name = args[0]
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			j.given = map[string]bool{}
			for _, name := range []string{flagLabels, flagAllNamespaces, flagNamespaceLabels, flagNoNamespaceSelector, flagReplicationHost, flagReplicationPort} {
				j.given[name] = cmd.Flags().Changed(name)
			}
			return j.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&j.name, "name", "", "the member's name (same as NAME)")
	f.StringVar(&j.memberKubeconfig, "member-kubeconfig", "", "admin kubeconfig of the member (required)")
	f.StringVar(&j.memberContext, "member-context", "", "context of --member-kubeconfig (default: its current context)")
	f.BoolVar(&j.allowInsecure, flagAllowInsecure, false, allowInsecureUsage)
	f.StringVar(&j.server, "server", "", "the member API server's address as the hub reaches it (default: the member kubeconfig's)")
	f.StringVar(&j.labels, flagLabels, "", "the MemberCluster's labels, k=v,... (exactly these: join's labels dropped here are removed; not given: kept)")
	f.BoolVar(&j.allNamespaces, flagAllNamespaces, false, "let Databases of every hub namespace use the member (spec.namespaceSelector: {})")
	f.StringVar(&j.namespaceLabels, flagNamespaceLabels, "", "let only hub namespaces with these labels (k=v,...) use the member")
	f.BoolVar(&j.noNamespaceSelector, flagNoNamespaceSelector, false, "remove the namespace selector an earlier join set (no hub namespace may place Databases)")
	f.StringVar(&j.replicationHost, flagReplicationHost, "", "spec.replication.hostTemplate, e.g. '$(DATABASE)-rw.$(NAMESPACE).eu-1.example.net' (\"\": remove spec.replication)")
	f.Int32Var(&j.replicationPort, flagReplicationPort, fleetv1alpha1.DefaultReplicationPort, "spec.replication.port")
	f.Var(&j.timeout, "timeout", "how long to wait for the member's token and for the member to become Ready (seconds, or a duration such as 2m)")
	f.BoolVar(&j.wait, "wait", true, "wait until the hub reports the member Ready (false when no hub runs yet)")
	// The removed hack/join-member.sh's names for the hub's kubeconfig and context.
	f.StringVar(o.flags.KubeConfig, "hub-kubeconfig", "", "the hub's kubeconfig (same as --kubeconfig)")
	f.StringVar(o.flags.Context, "hub-context", "", "the hub kubeconfig's context (same as --context)")
	return cmd
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// validate checks the flags and returns the MemberCluster's labels and
// namespace selector.
func (j *joinOptions) validate() (labels map[string]string, nsSelector *metav1.LabelSelector, err error) {
	if j.name == "" {
		return nil, nil, usagef("join needs the member's NAME")
	}
	if !dnsLabel.MatchString(j.name) || len(j.name) > 63 {
		return nil, nil, usagef("NAME must be a DNS label (lower-case letters, digits and '-', at most 63 characters): %s", j.name)
	}
	if j.memberKubeconfig == "" {
		return nil, nil, usagef("--member-kubeconfig is required")
	}
	if j.allNamespaces && j.namespaceLabels != "" {
		return nil, nil, usagef("--all-namespaces and --namespace-labels exclude each other")
	}
	if j.noNamespaceSelector && (j.allNamespaces || j.namespaceLabels != "") {
		return nil, nil, usagef("--no-namespace-selector excludes --all-namespaces and --namespace-labels")
	}
	if labels, err = parseLabels("--labels", j.labels); err != nil {
		return nil, nil, err
	}
	switch {
	case j.allNamespaces:
		nsSelector = &metav1.LabelSelector{}
	case j.namespaceLabels != "":
		m, err := parseLabels("--namespace-labels", j.namespaceLabels)
		if err != nil {
			return nil, nil, err
		}
		if len(m) == 0 {
			return nil, nil, usagef("--namespace-labels needs k=v[,k=v...]")
		}
		nsSelector = &metav1.LabelSelector{MatchLabels: m}
	}
	if j.replicationPort < 1 || j.replicationPort > 65535 {
		return nil, nil, usagef("--replication-port must be between 1 and 65535: %d", j.replicationPort)
	}
	return labels, nsSelector, nil
}

// parseLabels parses k=v,k=v; keys and values must be valid label keys and values.
func parseLabels(flag, s string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return nil, usagef("%s takes k=v[,k=v...]; got %q", flag, pair)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, usagef("%s: key %q: %s", flag, k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, usagef("%s: value %q: %s", flag, v, strings.Join(errs, "; "))
		}
		out[k] = v
	}
	return out, nil
}

func (j *joinOptions) run(ctx context.Context) error {
	labels, nsSelector, err := j.validate()
	if err != nil {
		return err
	}
	out := j.streams.Out
	memberCfg, err := j.memberConfig()
	if err != nil {
		return err
	}
	// tlsServerName is the member kubeconfig's tls-server-name, kept with
	// its server: the name the member's certificate carries when the
	// server is an address it does not name.
	var tlsServerName string
	if j.server == "" {
		j.server, tlsServerName = memberCfg.Host, memberCfg.ServerName
		fmt.Fprintf(j.streams.ErrOut, "join: --server not given, using %s from the member kubeconfig\n", j.server)
	}
	if !strings.HasPrefix(j.server, "https://") {
		fmt.Fprintf(j.streams.ErrOut, "join: warning: %s is not https: the hub refuses it unless the MemberCluster sets spec.connection.allowHTTP\n", j.server)
	}
	member, err := client.New(memberCfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("member client: %w", err)
	}
	hub, err := j.hubClient()
	if err != nil {
		return err
	}

	// Before anything is written: is this cluster registered already, under
	// another name?
	clusterID, err := j.refuseDuplicate(ctx, member, hub)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "join: installing the hub's identity in member %s\n", j.name)
	if err := j.installIdentity(ctx, member); err != nil {
		return err
	}
	fmt.Fprintf(out, "join: waiting for the token of %s/%s\n", memberdeploy.Namespace, memberdeploy.TokenSecret)
	token, ca, err := j.waitForToken(ctx, member)
	if err != nil {
		return err
	}
	kubeconfig, err := memberKubeconfig(j.name, j.server, tlsServerName, token, ca)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "join: writing Secret %s/%s-kubeconfig on the hub\n", j.hubNamespace, j.name)
	if err := j.writeSecret(ctx, hub, kubeconfig); err != nil {
		return err
	}
	fmt.Fprintf(out, "join: registering MemberCluster %s\n", j.name)
	hasSelector, err := j.applyMemberCluster(ctx, hub, labels, nsSelector, clusterID)
	if err != nil {
		return err
	}
	if !hasSelector {
		fmt.Fprintf(out, "join: no --all-namespaces or --namespace-labels: no hub namespace may place Databases on %s yet (set spec.namespaceSelector)\n", j.name)
	}
	if !j.wait {
		fmt.Fprintf(out, "join: %s registered; watch it with: kubectl get membercluster %s -w\n", j.name, j.name)
		return nil
	}
	if err := j.waitForReady(ctx, hub); err != nil {
		return err
	}
	fmt.Fprintf(out, "join: %s joined and Ready\n", j.name)
	return nil
}

// memberConfig is the REST config of --member-kubeconfig (and --member-context).
// It is that file's context or an error, never another cluster: client-go's
// deferred loader falls back to the in-cluster config when the file has no
// usable context (empty, or no current-context), and run in a Pod join would
// then install the hub's identity in, and register, the Pod's own cluster.
func (j *joinOptions) memberConfig() (*rest.Config, error) {
	raw, err := clientcmd.LoadFromFile(j.memberKubeconfig)
	if err == nil {
		// Relative certificate and key paths are the file's, as kubectl reads them.
		err = clientcmd.ResolveLocalPaths(raw)
	}
	if err != nil {
		return nil, fmt.Errorf("--member-kubeconfig %s: %w", j.memberKubeconfig, err)
	}
	name := j.memberContext
	if name == "" {
		name = raw.CurrentContext
	}
	if name == "" {
		return nil, usagef("--member-kubeconfig %s has no current context: pass --member-context", j.memberKubeconfig)
	}
	if _, ok := raw.Contexts[name]; !ok {
		return nil, usagef("--member-kubeconfig %s has no context %q", j.memberKubeconfig, name)
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, name, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--member-kubeconfig %s: %w", j.memberKubeconfig, err)
	}
	// Refused as the hub refuses it (clusters/trust.go): join would send the
	// admin's credentials to an unchecked server and take from it the CA
	// the hub then trusts for this member.
	if cfg.Insecure && !j.allowInsecure {
		return nil, usagef("--member-kubeconfig %s (context %q) sets insecure-skip-tls-verify: the member's identity would not be checked; "+
			"give the member's CA (certificate-authority-data) instead, or pass --%s", j.memberKubeconfig, name, flagAllowInsecure)
	}
	cfg.UserAgent = "kubectl-fleetdb"
	cfg.Timeout = j.callTimeout()
	return cfg, nil
}

// installIdentity applies deploy/member to the member, the Namespace first.
func (j *joinOptions) installIdentity(ctx context.Context, member client.Client) error {
	objs, err := memberdeploy.Render()
	if err != nil {
		return err
	}
	for _, obj := range objs {
		err := j.call(ctx, func(ctx context.Context) error {
			return member.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(FieldManager), client.ForceOwnership)
		})
		if err != nil {
			return fmt.Errorf("applying %s %s in the member: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// waitForToken waits until the member's token controller filled in the token Secret.
func (j *joinOptions) waitForToken(ctx context.Context, member client.Client) (token, ca []byte, err error) {
	key := types.NamespacedName{Namespace: memberdeploy.Namespace, Name: memberdeploy.TokenSecret}
	err = poll(ctx, time.Duration(j.timeout), 500*time.Millisecond, func() (bool, error) {
		var s corev1.Secret
		if err := j.call(ctx, func(ctx context.Context) error { return member.Get(ctx, key, &s) }); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		token, ca = s.Data[corev1.ServiceAccountTokenKey], s.Data[corev1.ServiceAccountRootCAKey]
		return len(token) > 0 && len(ca) > 0, nil
	})
	if errors.Is(err, errTimedOut) {
		return nil, nil, fmt.Errorf("the member did not issue a token for %s within %s (is its kube-controller-manager running?)", key, time.Duration(j.timeout))
	}
	return token, ca, err
}

// memberKubeconfig is the kubeconfig the hub uses for the member: the
// ServiceAccount's token and the member's CA (and the TLS server name the
// member's certificate is checked against, when given), nothing read from
// files, nothing of the user's credentials.
func memberKubeconfig(name, server, tlsServerName string, token, ca []byte) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, TLSServerName: tlsServerName, CertificateAuthorityData: ca}
	cfg.AuthInfos[memberdeploy.ServiceAccount] = &clientcmdapi.AuthInfo{Token: string(token)}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: memberdeploy.ServiceAccount}
	cfg.CurrentContext = name
	return clientcmd.Write(*cfg)
}

// writeSecret creates the hub namespace when missing and applies the
// kubeconfig Secret (an unchanged kubeconfig changes nothing).
func (j *joinOptions) writeSecret(ctx context.Context, hub client.Client, kubeconfig []byte) error {
	err := j.call(ctx, func(ctx context.Context) error {
		err := hub.Get(ctx, types.NamespacedName{Name: j.hubNamespace}, &corev1.Namespace{})
		if apierrors.IsNotFound(err) {
			err = hub.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: j.hubNamespace}})
			if apierrors.IsAlreadyExists(err) {
				err = nil
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("hub namespace %s: %w", j.hubNamespace, err)
	}
	secret := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": string(corev1.SecretTypeOpaque),
		"metadata": map[string]any{
			"namespace": j.hubNamespace, "name": j.name + "-kubeconfig",
			"labels": map[string]any{labelPartOf: "fleetdb", labelMemberCluster: j.name},
		},
		// Unstructured data holds base64 strings, as on the wire.
		"data": map[string]any{"kubeconfig": base64.StdEncoding.EncodeToString(kubeconfig)},
	}}
	return j.call(ctx, func(ctx context.Context) error {
		return hub.Apply(ctx, client.ApplyConfigurationFromUnstructured(secret), client.FieldOwner(FieldManager), client.ForceOwnership)
	})
}

// applyMemberCluster applies the MemberCluster with exactly the given
// labels and settings (spec.unschedulable and spec.drain are not join's).
// refuseDuplicate returns the member's cluster id (its kube-system
// Namespace's uid) and an error when another MemberCluster records the same
// id: one cluster joined twice under two names gets two writers for its
// objects, and a placement removal with onPlacementRemoval Delete under one
// name would delete volumes the other still serves.
func (j *joinOptions) refuseDuplicate(ctx context.Context, member, hub client.Client) (string, error) {
	var ns corev1.Namespace
	if err := j.call(ctx, func(ctx context.Context) error {
		return member.Get(ctx, types.NamespacedName{Name: metav1.NamespaceSystem}, &ns)
	}); err != nil {
		return "", fmt.Errorf("reading the member's kube-system Namespace (its cluster id): %w", err)
	}
	id := string(ns.UID)
	var mcs fleetv1alpha1.MemberClusterList
	if err := j.call(ctx, func(ctx context.Context) error { return hub.List(ctx, &mcs) }); err != nil {
		return "", fmt.Errorf("listing MemberClusters: %w", err)
	}
	for _, mc := range mcs.Items {
		if mc.Name != j.name && mc.Annotations[fleetv1alpha1.AnnotationClusterID] == id {
			return "", fmt.Errorf("refusing to join %s: this cluster (kube-system uid %s) is joined already as MemberCluster %s; "+
				"one cluster registered twice gets two writers, and a placement removal under one name could delete volumes the other serves", j.name, id, mc.Name)
		}
	}
	return id, nil
}

// applyMemberCluster applies the MemberCluster: the settings whose flags
// were given as given, and what an earlier join set for the others as it
// is (a server-side apply removes the fields join owned and leaves out, so
// join run again without --namespace-labels to rotate the token would drop
// the selector, and the hub would tear down the Databases placed by it).
// It returns whether the MemberCluster has a namespace selector.
func (j *joinOptions) applyMemberCluster(ctx context.Context, hub client.Client, labels map[string]string, nsSelector *metav1.LabelSelector, clusterID string) (bool, error) {
	prior := &unstructured.Unstructured{}
	prior.SetGroupVersionKind(fleetv1alpha1.GroupVersion.WithKind("MemberCluster"))
	err := j.call(ctx, func(ctx context.Context) error { return hub.Get(ctx, types.NamespacedName{Name: j.name}, prior) })
	switch {
	case meta.IsNoMatchError(err):
		return false, fmt.Errorf("the MemberCluster CRD is not installed on the hub (kubectl apply -k deploy/crds): %w", err)
	case apierrors.IsNotFound(err):
		prior = nil
	case err != nil:
		return false, fmt.Errorf("reading MemberCluster %s: %w", j.name, err)
	}
	owned := joinOwned(prior)
	spec := map[string]any{
		"kubeconfigSecretRef": map[string]any{"name": j.name + "-kubeconfig", "key": "kubeconfig"},
	}
	keep := func(field string) {
		if v, ok, _ := unstructured.NestedFieldNoCopy(prior.Object, "spec", field); ok && owned.has("f:spec", "f:"+field) {
			spec[field] = v
		}
	}
	if !j.given[flagAllNamespaces] && !j.given[flagNamespaceLabels] && !j.given[flagNoNamespaceSelector] && prior != nil {
		keep("namespaceSelector")
	}
	if !j.given[flagLabels] && prior != nil {
		for k, v := range prior.GetLabels() {
			if owned.has("f:metadata", "f:labels", "f:"+k) {
				labels[k] = v
			}
		}
	}
	if nsSelector != nil {
		sel := map[string]any{}
		if len(nsSelector.MatchLabels) > 0 {
			ml := map[string]any{}
			for k, v := range nsSelector.MatchLabels {
				ml[k] = v
			}
			sel["matchLabels"] = ml
		}
		spec["namespaceSelector"] = sel
	}
	switch {
	case j.replicationHost != "":
		spec["replication"] = map[string]any{"hostTemplate": j.replicationHost, "port": int64(j.replicationPort)}
	case j.given[flagReplicationHost] || prior == nil:
	case j.given[flagReplicationPort]:
		if host, ok, _ := unstructured.NestedString(prior.Object, "spec", "replication", "hostTemplate"); ok && host != "" && owned.has("f:spec", "f:replication") {
			spec["replication"] = map[string]any{"hostTemplate": host, "port": int64(j.replicationPort)}
		}
	default:
		keep("replication")
	}
	lbls := map[string]any{}
	for k, v := range labels {
		lbls[k] = v
	}
	mc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": fleetv1alpha1.GroupVersion.String(), "kind": "MemberCluster",
		"metadata": map[string]any{"name": j.name, "labels": lbls,
			"annotations": map[string]any{fleetv1alpha1.AnnotationClusterID: clusterID}},
		"spec": spec,
	}}
	err = j.call(ctx, func(ctx context.Context) error {
		return hub.Apply(ctx, client.ApplyConfigurationFromUnstructured(mc), client.FieldOwner(FieldManager), client.ForceOwnership)
	})
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		return false, fmt.Errorf("the MemberCluster CRD is not installed on the hub (kubectl apply -k deploy/crds): %w", err)
	}
	_, hasSelector := spec["namespaceSelector"]
	if !hasSelector && prior != nil {
		_, hasSelector, _ = unstructured.NestedFieldNoCopy(prior.Object, "spec", "namespaceSelector")
		hasSelector = hasSelector && !j.given[flagNoNamespaceSelector]
	}
	return hasSelector, err
}

// fieldSet is a managedFields entry's field set (FieldsV1 JSON).
type fieldSet map[string]any

// has tells whether the set holds the path (or a field under it).
func (f fieldSet) has(path ...string) bool {
	cur := map[string]any(f)
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return false
		}
		cur = next
	}
	return true
}

// joinOwned is the set of fields join's server-side apply owns in obj.
func joinOwned(obj *unstructured.Unstructured) fieldSet {
	if obj == nil {
		return nil
	}
	for _, m := range obj.GetManagedFields() {
		if m.Manager != FieldManager || m.Operation != metav1.ManagedFieldsOperationApply || m.Subresource != "" || m.FieldsV1 == nil {
			continue
		}
		var fs fieldSet
		if err := json.Unmarshal(m.FieldsV1.GetRawBytes(), &fs); err == nil {
			return fs
		}
	}
	return nil
}

// waitForReady waits until the hub reports the MemberCluster Ready.
func (j *joinOptions) waitForReady(ctx context.Context, hub client.Client) error {
	fmt.Fprintf(j.streams.Out, "join: waiting for the hub to report %s Ready\n", j.name)
	var last metav1.Condition
	err := poll(ctx, time.Duration(j.timeout), time.Second, func() (bool, error) {
		var mc fleetv1alpha1.MemberCluster
		if err := j.call(ctx, func(ctx context.Context) error { return hub.Get(ctx, types.NamespacedName{Name: j.name}, &mc) }); err != nil {
			return false, err
		}
		if c := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.MemberConditionReady); c != nil {
			last = *c
		}
		return last.Status == metav1.ConditionTrue, nil
	})
	if errors.Is(err, errTimedOut) {
		why := "no Ready condition yet: is the hub running?"
		if last.Type != "" {
			why = fmt.Sprintf("Ready=%s %s: %s", last.Status, last.Reason, last.Message)
		}
		return fmt.Errorf("member %s is not Ready after %s (%s); the registration stays, run join again or kubectl fleetdb explain", j.name, time.Duration(j.timeout), why)
	}
	return err
}

var errTimedOut = errors.New("timed out")

// poll calls cond every interval until it is true, it fails, ctx ends or
// timeout passes (errTimedOut).
func poll(ctx context.Context, timeout, interval time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return errTimedOut
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// secondsOrDuration is a flag that takes a number of seconds (as
// the removed hack/join-member.sh's --timeout did) or a Go duration.
type secondsOrDuration time.Duration

func (d *secondsOrDuration) String() string { return time.Duration(*d).String() }
func (d *secondsOrDuration) Type() string   { return "duration" }

func (d *secondsOrDuration) Set(s string) error {
	if n, err := strconv.Atoi(s); err == nil && n >= 0 {
		*d = secondsOrDuration(time.Duration(n) * time.Second)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("%q is neither seconds nor a duration", s)
	}
	*d = secondsOrDuration(v)
	return nil
}
