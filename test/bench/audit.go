package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"strings"
	"sync"

	"github.com/fleetdb/fleetdb/hub"
)

// auditPolicy makes every kube-apiserver of the bench fleet log one line per
// write request (metadata only, no bodies), whoever sent it. The benchmark
// counts the lines by user agent: the API servers' own record of who wrote.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
`

// Clients as the audit log names them (by user agent prefix).
const (
	agentHub    = "fleetdb-hub"  // the hub process: rest.DefaultKubernetesUserAgent of bin "fleetdb-hub"
	agentDirect = "bench-direct" // the baseline's server-side applies
	agentDriver = "bench-driver" // the benchmark creating, changing and deleting Databases on the hub
	agentOther  = "other"        // kube-controller-manager, scheduler, kwok, ...
	// agentHubLiveness is the hub's renewals of its own liveness Leases (a
	// sharded replica's peer Lease, the elected leader's Lease): counted
	// apart, not as the hub's writes (one per replica and period, also at rest).
	agentHubLiveness = "fleetdb-hub liveness"
	uaDirect         = "fleetdb-bench-direct"
	uaDriver         = "fleetdb-bench-driver"
)

func classifyAgent(ua string) string {
	switch {
	case strings.HasPrefix(ua, "fleetdb-hub/"), ua == "fleetdb-hub":
		return agentHub
	case strings.HasPrefix(ua, uaDirect):
		return agentDirect
	case strings.HasPrefix(ua, uaDriver):
		return agentDriver
	default:
		return agentOther
	}
}

// writeKey is one counter of the audit logs.
type writeKey struct {
	Cluster  string // "hub" or a member name
	Agent    string
	Verb     string
	Resource string // resource[/subresource], with the response code when not 2xx
}

type writeCounts map[writeKey]int

// sub returns c - prev.
func (c writeCounts) sub(prev writeCounts) writeCounts {
	out := writeCounts{}
	for k, v := range c {
		if d := v - prev[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// total adds up the counters for which keep is true.
func (c writeCounts) total(keep func(writeKey) bool) int {
	n := 0
	for k, v := range c {
		if keep(k) {
			n += v
		}
	}
	return n
}

// byResource folds the counters for which keep is true by verb and resource.
func (c writeCounts) byResource(keep func(writeKey) bool) map[string]int {
	out := map[string]int{}
	for k, v := range c {
		if keep(k) {
			out[k.Verb+" "+k.Resource] += v
		}
	}
	return out
}

// auditCounter tails the audit logs of the fleet and counts write requests.
type auditCounter struct {
	mu     sync.Mutex
	files  map[string]string // cluster -> path
	offset map[string]int64
	tail   map[string][]byte
	counts writeCounts
	agents map[string]int // user agents seen, for the report
}

func newAuditCounter(files map[string]string) *auditCounter {
	return &auditCounter{
		files: files, offset: map[string]int64{}, tail: map[string][]byte{},
		counts: writeCounts{}, agents: map[string]int{},
	}
}

type auditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// snapshot reads what the logs gained since the last call and returns a copy
// of the running counters.
func (a *auditCounter) snapshot() (writeCounts, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for cluster, path := range a.files {
		if err := a.read(cluster, path); err != nil {
			return nil, err
		}
	}
	return maps.Clone(a.counts), nil
}

func (a *auditCounter) read(cluster, path string) error {
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil // no write yet
		}
		return err
	}
	defer f.Close()
	if _, err := f.Seek(a.offset[cluster], io.SeekStart); err != nil {
		return err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	a.offset[cluster] += int64(len(data))
	data = append(a.tail[cluster], data...)
	last := bytes.LastIndexByte(data, '\n')
	if last < 0 {
		a.tail[cluster] = data
		return nil
	}
	a.tail[cluster] = append([]byte(nil), data[last+1:]...)
	for line := range bytes.SplitSeq(data[:last], []byte{'\n'}) {
		if len(line) == 0 {
			continue
		}
		var ev auditEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("audit log %s: %w", path, err)
		}
		if ev.Stage != "ResponseComplete" && ev.Stage != "Panic" {
			continue
		}
		res := ""
		if ev.ObjectRef != nil {
			res = ev.ObjectRef.Resource
			if ev.ObjectRef.Subresource != "" {
				res += "/" + ev.ObjectRef.Subresource
			}
		}
		if ev.ResponseStatus != nil && (ev.ResponseStatus.Code < 200 || ev.ResponseStatus.Code > 299) {
			res += fmt.Sprintf(" (%d)", ev.ResponseStatus.Code) // refused or failed writes are told apart
		}
		agent := classifyAgent(ev.UserAgent)
		if agent == agentHub && cluster == "hub" && ev.Verb == "update" && ev.ObjectRef != nil && isLivenessLease(ev.ObjectRef.Resource, ev.ObjectRef.Name) {
			agent = agentHubLiveness
		}
		a.counts[writeKey{Cluster: cluster, Agent: agent, Verb: ev.Verb, Resource: res}]++
		ua, _, _ := strings.Cut(ev.UserAgent, " ")
		a.agents[ua]++
	}
	return nil
}

// isLivenessLease tells a hub replica's own liveness Lease: its peer Lease
// (sharded hub) or the elected leader's Lease.
func isLivenessLease(resource, name string) bool {
	return resource == "leases" && (strings.HasPrefix(name, hub.ShardPeerPrefix+"-") || name == hub.LeaderElectionID)
}
