package fleet

import (
	"net/http"
	"sync"
)

// WriteCounter counts the write requests (anything but GET, HEAD and
// OPTIONS; GET covers get, list and watch) sent through the transports it
// wraps, per target. The zero value is ready to use.
type WriteCounter struct {
	mu sync.Mutex
	// log are the writes since the last Take or Reset, as "target: METHOD
	// path" ("METHOD path" for the target "").
	log []string
	// total counts every write per target, never reset.
	total map[string]int
}

// Wrap returns rt with its writes counted under target.
func (w *WriteCounter) Wrap(target string, rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		switch req.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			w.add(target, req.Method+" "+req.URL.Path)
		}
		return rt.RoundTrip(req)
	})
}

func (w *WriteCounter) add(target, write string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if target != "" {
		write = target + ": " + write
	}
	w.log = append(w.log, write)
	if w.total == nil {
		w.total = map[string]int{}
	}
	w.total[target]++
}

// Writes returns how many writes were sent since the last Take or Reset, and which.
func (w *WriteCounter) Writes() (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.log), append([]string(nil), w.log...)
}

// Take returns the writes sent since the last Take or Reset and forgets them.
func (w *WriteCounter) Take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.log
	w.log = nil
	return out
}

// Reset forgets the writes sent so far (Total keeps counting).
func (w *WriteCounter) Reset() { w.Take() }

// Total is the number of writes ever sent to target.
func (w *WriteCounter) Total(target string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total[target]
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
