package clusters

import "sync"

// Subscribe returns a channel that receives a member's name whenever it is
// engaged or disengaged or its Ready state changes; read Health for the news.
// The provider never waits for a subscriber: names queue per subscriber and
// repeated names coalesce while unread, so a slow reader sees each changed
// member once rather than every change. The channel closes when the provider
// stops. A new subscriber first hears every member the provider knows now:
// one that subscribes after the members connected (a standby's controllers,
// started when it takes the Lease, on a provider that runs on every replica)
// learns of them as one that subscribed before them does.
func (p *Provider) Subscribe() <-chan string {
	s := &subscriber{
		pending: map[string]bool{},
		wake:    make(chan struct{}, 1),
		out:     make(chan string),
	}
	p.mu.Lock()
	p.subs = append(p.subs, s)
	known := p.knownLocked()
	p.mu.Unlock()
	for _, name := range known {
		s.push(name)
	}
	go s.pump(p.done)
	return s.out
}

// notify tells every subscriber about the member.
func (p *Provider) notify(name string) {
	p.mu.RLock()
	subs := p.subs
	p.mu.RUnlock()
	for _, s := range subs {
		s.push(name)
	}
}

// subscriber is one Subscribe channel with its queue of unread names.
type subscriber struct {
	mu      sync.Mutex
	queue   []string
	pending map[string]bool
	wake    chan struct{}
	out     chan string
}

// push queues name unless it is already queued; it never blocks.
func (s *subscriber) push(name string) {
	s.mu.Lock()
	if !s.pending[name] {
		s.pending[name] = true
		s.queue = append(s.queue, name)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pop takes the oldest queued name.
func (s *subscriber) pop() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return "", false
	}
	name := s.queue[0]
	s.queue = s.queue[1:]
	delete(s.pending, name)
	return name, true
}

// pump delivers queued names to out until done closes, then closes out.
func (s *subscriber) pump(done <-chan struct{}) {
	defer close(s.out)
	for {
		select {
		case <-done:
			return
		case <-s.wake:
		}
		for name, ok := s.pop(); ok; name, ok = s.pop() {
			select {
			case s.out <- name:
			case <-done:
				return
			}
		}
	}
}
