package fleet

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
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
	// hung are targets whose writes block until their request's deadline,
	// each with the part of the path such a write has ("/": every write).
	hung map[string]string
	// hanging counts the write requests blocked now.
	hanging atomic.Int64
}

// Hang makes the target's writes block until their request's deadline (on),
// or not: a member whose writes hang while its reads and probes pass.
func (w *WriteCounter) Hang(target string, on bool) {
	if !on {
		w.HangPaths(target, "")
		return
	}
	w.HangPaths(target, "/")
}

// HangPaths makes the target's writes whose URL path contains part block
// until their request's deadline ("" stops it): a member where one object
// cannot be written while the rest of the member's writes pass.
func (w *WriteCounter) HangPaths(target, part string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hung == nil {
		w.hung = map[string]string{}
	}
	if part == "" {
		delete(w.hung, target)
		return
	}
	w.hung[target] = part
}

// Hanging is the number of write requests blocked by Hang now.
func (w *WriteCounter) Hanging() int64 { return w.hanging.Load() }

// Wrap returns rt with its writes counted under target.
func (w *WriteCounter) Wrap(target string, rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		switch req.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if w.add(target, req.Method, req.URL.Path) {
				w.hanging.Add(1)
				defer w.hanging.Add(-1)
				<-req.Context().Done()
				return nil, req.Context().Err()
			}
		}
		return rt.RoundTrip(req)
	})
}

// add records a write and reports whether it hangs.
func (w *WriteCounter) add(target, method, path string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	write := method + " " + path
	if target != "" {
		write = target + ": " + write
	}
	w.log = append(w.log, write)
	if w.total == nil {
		w.total = map[string]int{}
	}
	w.total[target]++
	part, ok := w.hung[target]
	return ok && strings.Contains(path, part)
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
