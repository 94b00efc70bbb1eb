package clusters

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// RegistrySource is a controller source fed by the cluster registry: every
// member whose engagement or readiness changed is mapped to requests, which
// go into the controller's queue (where repeated requests fold into one).
// The controller starts it with its own context, so the manager supervises it
// and it stops with the manager.
type RegistrySource[T comparable] struct {
	Provider *Provider
	// Requests maps a member that changed, with its health now, to requests.
	// One goroutine calls it, in the order of the registry's news.
	Requests func(member string, h Health) []T
}

var _ source.TypedSource[struct{}] = RegistrySource[struct{}]{}

// Start implements source.TypedSource: it subscribes to the registry and
// feeds q until ctx ends or the registry stops.
func (s RegistrySource[T]) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[T]) error {
	events := s.Provider.Subscribe()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case name, ok := <-events:
				if !ok {
					return
				}
				for _, req := range s.Requests(name, s.Provider.Health(name)) {
					q.Add(req)
				}
			}
		}
	}()
	return nil
}

// String names the source in controller-runtime's logs.
func (s RegistrySource[T]) String() string { return "cluster registry" }
