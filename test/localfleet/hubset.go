package localfleet

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
)

// HubSet runs hub replicas with leader election, one child process each,
// named (hub-0, hub-1, ...): one acts, the others stand by. A replica can be
// killed and started again under its name; every process keeps its own log.
type HubSet struct {
	opts    HubOptions
	dir     string
	onStart func(*HubProcess)

	mu     sync.Mutex
	procs  map[string]*HubProcess
	logs   []string
	starts map[string]int
}

// NewHubSet returns a set whose replicas run with opts (Binary, Kubeconfig,
// Args, StopGrace; LogPath and ReplicaName are per replica) plus
// --leader-elect, their logs in dir. onStart, when set, sees every process
// started (e.g. to let a watchdog track it).
func NewHubSet(opts HubOptions, dir string, onStart func(*HubProcess)) *HubSet {
	return &HubSet{opts: opts, dir: dir, onStart: onStart, procs: map[string]*HubProcess{}, starts: map[string]int{}}
}

// Start starts the replica name (again, after it stopped or was killed).
func (s *HubSet) Start(name string) (*HubProcess, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.procs[name]; p != nil {
		if exited, _ := p.Exited(); !exited {
			return nil, fmt.Errorf("hub replica %s is running", name)
		}
	}
	s.starts[name]++
	opts := s.opts
	opts.ReplicaName = name
	opts.LogPath = filepath.Join(s.dir, name+".log")
	if n := s.starts[name]; n > 1 {
		opts.LogPath = filepath.Join(s.dir, fmt.Sprintf("%s-%d.log", name, n))
	}
	opts.Args = append([]string{"--leader-elect"}, opts.Args...)
	p, err := StartHub(opts)
	if err != nil {
		return nil, err
	}
	s.procs[name] = p
	s.logs = append(s.logs, p.LogPath)
	if s.onStart != nil {
		s.onStart(p)
	}
	return p, nil
}

// Replica returns the latest process of the replica name, or nil.
func (s *HubSet) Replica(name string) *HubProcess {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[name]
}

// Names are the replicas' names, sorted.
func (s *HubSet) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.procs))
	for name := range s.procs {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Logs are the log files of every process the set started, oldest first.
func (s *HubSet) Logs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.logs)
}

// Exited returns the first replica (by name) whose latest process ended,
// with how it ended; "" when all run.
func (s *HubSet) Exited() (string, error) {
	for _, name := range s.Names() {
		if exited, err := s.Replica(name).Exited(); exited {
			if err == nil {
				err = errors.New("exit status 0")
			}
			return name, err
		}
	}
	return "", nil
}

// Stop stops every replica (HubProcess.Stop) at once, so that no standby
// takes over from a leader stopping.
func (s *HubSet) Stop() {
	if s == nil {
		return
	}
	names := s.Names()
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Replica(name).Stop()
		}()
	}
	wg.Wait()
}
