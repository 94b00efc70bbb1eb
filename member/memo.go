package member

import (
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/cache"
)

// Memo remembers, per member object, what fleetdb last applied and what the
// API server answered, so that Apply sends nothing while the member still
// holds exactly that: a steady fleet makes zero write requests.
//
// One Memo serves a whole hub process; its keys include the cluster name.
// It is safe for concurrent use. An empty Memo (after a hub restart, or a
// Forget) costs no write either: Apply fills it from the live objects that
// carry the applied hash of the same rendering and hold every value an apply
// would send (see item.seed); the others are applied.
type Memo struct {
	mu      sync.Mutex
	entries map[memoKey]memoEntry
	// deleted are objects Teardown sent a delete for, by UID: a teardown pass
	// that runs on a cache that has not seen the deletion yet does not send
	// it again. Entries expire; one evicted early costs one more delete.
	deleted *cache.LRUExpireCache
}

const (
	// deletedMemory is how long a sent delete is remembered.
	deletedMemory = time.Minute
	// deletedEntries bounds the deletes remembered.
	deletedEntries = 4096
)

type memoKey struct {
	cluster   string
	gvk       schema.GroupVersionKind
	namespace string
	name      string
}

type memoEntry struct {
	// hash is the hash of the rendered object, see objectHash.
	hash string
	// version is the object's metadata.generation as the apply returned it
	// when the kind has one, else its resourceVersion; see liveVersion.
	version string
	// resourceVersion as the apply returned it, to tell a no-op re-apply
	// from one that put something back.
	resourceVersion string
	// database is "namespace/name" of the hub Database the object belongs to.
	database string
	// uid and generation of the object as the apply returned it (generation
	// 0 for kinds without one), to tell a cache that has not seen this write
	// yet from a change by someone else; see behind.
	uid        types.UID
	generation int64
}

// behind reports whether live is an older state of the object e remembers
// writing: same object (UID), lower generation. Generations only grow, so a
// live object behind the write comes from a cache that has not seen it yet,
// not from someone else's change (that would carry a higher generation); its
// watch event brings the written state, or the next change, for another look.
func (e memoEntry) behind(live metav1.Object) bool {
	g := live.GetGeneration()
	return e.uid != "" && live.GetUID() == e.uid && g > 0 && g < e.generation
}

// NewMemo returns an empty Memo.
func NewMemo() *Memo {
	return &Memo{entries: map[memoKey]memoEntry{}, deleted: cache.NewLRUExpireCache(deletedEntries)}
}

// Forget drops everything remembered about cluster, e.g. when the hub
// disconnects from it: after a reconnect every object is applied once again.
func (m *Memo) Forget(cluster string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.entries {
		if k.cluster == cluster {
			delete(m.entries, k)
		}
	}
}

// ForgetDatabase drops what is remembered about the objects of the hub
// Database namespace/name in cluster, e.g. after Teardown, so that the memory
// held stays bounded by the live Databases.
func (m *Memo) ForgetDatabase(cluster, namespace, name string) {
	if m == nil {
		return
	}
	db := namespace + "/" + name
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, e := range m.entries {
		if k.cluster == cluster && e.database == db {
			delete(m.entries, k)
		}
	}
}

// Wrote reports whether obj, an object of kind gvk in cluster, is exactly
// what fleetdb's last apply of it returned (same resourceVersion): a watch
// event for it brings nothing new.
func (m *Memo) Wrote(cluster string, gvk schema.GroupVersionKind, obj metav1.Object) bool {
	e, ok := m.get(memoKey{cluster: cluster, gvk: gvk, namespace: obj.GetNamespace(), name: obj.GetName()})
	return ok && e.resourceVersion != "" && e.resourceVersion == obj.GetResourceVersion()
}

// markDeleted remembers that a delete was sent for uid.
func (m *Memo) markDeleted(uid types.UID) {
	if m != nil && uid != "" {
		m.deleted.Add(uid, struct{}{}, deletedMemory)
	}
}

// deleteSent reports whether a delete for uid was sent recently.
func (m *Memo) deleteSent(uid types.UID) bool {
	if m == nil || uid == "" {
		return false
	}
	_, ok := m.deleted.Get(uid)
	return ok
}

func (m *Memo) get(k memoKey) (memoEntry, bool) {
	if m == nil {
		return memoEntry{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[k]
	return e, ok
}

func (m *Memo) put(k memoKey, e memoEntry) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries[k] = e
}

func (m *Memo) drop(k memoKey) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.entries, k)
}

// len is the number of remembered objects (for tests).
func (m *Memo) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}
