package member

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// SecretAccessRole is the ClusterRole of deploy/member that holds the hub's
// Secret rights in a member; the hub binds it to itself, by a RoleBinding of
// the same name, in each namespace fleetdb manages (EnsureSecretAccess). The
// member identity's own ClusterRole has no Secret rights, only "bind" on this
// role and "create" on RoleBindings, which the member's admission policy
// holds to managed namespaces, this roleRef and the identity itself.
const SecretAccessRole = "fleetdb-hub-agent-secrets"

// probeSecret is the Secret name read to learn whether the hub may read
// Secrets in a namespace: a Get answers 403 before it looks for the object
// (the authorizer runs first), so its name does not matter; a name no
// Database renders (a Database name is a DNS label) keeps it a pure probe.
const probeSecret = "fleetdb.access-probe"

// SecretAccess remembers, per member and namespace, that the hub may use
// Secrets there, so that only the first sync of a namespace (after a hub
// start) pays the probe. Forget drops a namespace whose Secrets the member
// refused after all (its RoleBinding removed by the member's admins): the
// next sync binds again.
type SecretAccess struct {
	mu    sync.Mutex
	ready map[string]bool
}

// NewSecretAccess returns an empty SecretAccess.
func NewSecretAccess() *SecretAccess { return &SecretAccess{ready: map[string]bool{}} }

func accessKey(cluster, namespace string) string { return cluster + "/" + namespace }

// Forget drops what is known of namespace in cluster.
func (a *SecretAccess) Forget(cluster, namespace string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.ready, accessKey(cluster, namespace))
}

func (a *SecretAccess) known(cluster, namespace string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ready[accessKey(cluster, namespace)]
}

func (a *SecretAccess) set(cluster, namespace string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ready[accessKey(cluster, namespace)] = true
}

// Ensure makes sure that the hub may read and write Secrets in namespace ns
// of cluster before any Secret of it is read or written. It reports false
// only when create is nil and the namespace does not exist. In this order:
//
//   - known from an earlier call: nothing is sent;
//   - a live Get of a Secret in ns that the member does not refuse (an
//     identity that may read Secrets there already: an admin kubeconfig, a
//     binding made earlier): nothing else is sent;
//   - refused: the Namespace is read; a missing one is created from create
//     (the rendered Namespace with its managed label) or, when create is nil
//     (a teardown never creates a namespace), reported as absent: nothing of
//     the Database can be in it;
//   - the RoleBinding SecretAccessRole is created in ns, binding the role to
//     the identity the hub authenticates as (SelfSubjectReview; the member's
//     admission policy admits it only for its own identity, only in a
//     managed namespace);
//   - the Secret Get is repeated, with backoff, until the member's authorizer
//     has the binding (RBAC takes effect once the API server's informers
//     see it, a moment after the create) or ctx ends.
//
// A refusal of the RoleBinding (the namespace is not managed) is returned as
// the API server's Forbidden error, with the policy's message.
func (a *SecretAccess) Ensure(ctx context.Context, cluster string, c client.Client, live client.Reader, ns string, create *corev1.Namespace) (present bool, err error) {
	if a.known(cluster, ns) {
		return true, nil
	}
	if ok, err := mayReadSecrets(ctx, live, ns); err != nil || ok {
		if ok {
			a.set(cluster, ns)
		}
		return ok, err
	}
	exists, err := namespaceExists(ctx, live, ns)
	if err != nil {
		return false, err
	}
	if !exists {
		if create == nil {
			return false, nil
		}
		if _, err := createNamespace(ctx, c, create); err != nil {
			return false, err
		}
	}
	if err := bindSecretRole(ctx, c, ns); err != nil {
		return true, err
	}
	err = wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Steps: 1 << 20, Cap: time.Second},
		func(ctx context.Context) (bool, error) { return mayReadSecrets(ctx, live, ns) })
	if err != nil {
		return true, fmt.Errorf("waiting for the member to grant the Secrets of namespace %s (RoleBinding %s): %w", ns, SecretAccessRole, err)
	}
	a.set(cluster, ns)
	return true, nil
}

// mayReadSecrets reports whether a Secret Get in ns is authorized (any
// answer but 403; a missing namespace answers 404 only to an identity that
// may read Secrets there).
func mayReadSecrets(ctx context.Context, live client.Reader, ns string) (bool, error) {
	err := live.Get(ctx, client.ObjectKey{Namespace: ns, Name: probeSecret}, &corev1.Secret{})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return true, nil
	case apierrors.IsForbidden(err):
		return false, nil
	default:
		return false, fmt.Errorf("reading Secrets in namespace %s: %w", ns, err)
	}
}

// bindSecretRole creates the RoleBinding of SecretAccessRole in ns for the
// identity the hub authenticates as; one that exists already is kept.
func bindSecretRole(ctx context.Context, c client.Client, ns string) error {
	return BindSelf(ctx, c, ns, SecretAccessRole)
}

// BindSelf creates in ns the RoleBinding named role, of the ClusterRole
// role, for the identity c authenticates as (SelfSubject), labelled as
// fleetdb's; one that exists already is kept. The hub binds its Secret roles
// this way, in the members and in the hub cluster.
func BindSelf(ctx context.Context, c client.Client, ns, role string) error {
	subject, err := SelfSubject(ctx, c)
	if err != nil {
		return fmt.Errorf("reading the hub's identity: %w", err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: role, Labels: map[string]string{
			fleetv1alpha1.LabelManagedBy: fleetv1alpha1.ManagedByValue,
		}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{subject},
	}
	if err := c.Create(ctx, rb, client.FieldOwner(fleetv1alpha1.FieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("binding %s in namespace %s: %w", role, ns, err)
	}
	return nil
}

// SelfSubject is the RBAC subject of the identity c authenticates as, as its
// API server names it (SelfSubjectReview, which every authenticated user may
// create).
func SelfSubject(ctx context.Context, c client.Client) (rbacv1.Subject, error) {
	self := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, self); err != nil {
		return rbacv1.Subject{}, fmt.Errorf("SelfSubjectReview: %w", err)
	}
	return subjectOf(self.Status.UserInfo.Username)
}

// subjectOf is the RBAC subject of an authenticated user name: a
// ServiceAccount for "system:serviceaccount:<namespace>:<name>", else a User.
func subjectOf(username string) (rbacv1.Subject, error) {
	if username == "" {
		return rbacv1.Subject{}, fmt.Errorf("the member did not say who the hub is (SelfSubjectReview without a user name)")
	}
	if rest, ok := strings.CutPrefix(username, "system:serviceaccount:"); ok {
		ns, name, ok := strings.Cut(rest, ":")
		if ok && ns != "" && name != "" {
			return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}, nil
		}
	}
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: username}, nil
}
