package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/fleetdb/fleetdb/test/localfleet"
)

// auditPolicyFile is the local fleet's audit policy, in its folder.
const auditPolicyFile = "audit-policy.yaml"

// auditPolicy makes every API server of the suite's local fleet log one line
// per write request and per watch (metadata only: no bodies, so no Secret
// data), whoever sent it; FailoverSpec tells the hub replicas apart by user
// agent (a watch shows a standby warm: connected before it leads).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection, watch]
- level: None
`

// refusedHub matches a hub log line where the hub API server refused the
// hub's own identity (the ServiceAccount fleetdb-hub of deploy/rbac; the
// hub's identity in members is fleetdb-hub-agent, which does not match).
var refusedHub = regexp.MustCompile(`(?i)forbidden.*serviceaccount:fleetdb-system:fleetdb-hub([^-a-z0-9]|$)`)

// forbiddenLines returns the lines of every hub replica's log in which the
// hub API server refused the hub's identity, oldest process first.
func forbiddenLines(hubs *localfleet.HubSet) []string {
	if hubs == nil {
		return nil
	}
	var out []string
	for _, path := range hubs.Logs() {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			if line := sc.Bytes(); bytes.Contains(bytes.ToLower(line), []byte("forbidden")) && refusedHub.Match(line) {
				out = append(out, path+": "+truncateLine(string(line), 600))
			}
		}
		_ = f.Close()
	}
	return out
}

func truncateLine(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// auditWrite is one write request (or watch) in an API server's audit log.
type auditWrite struct {
	// Replica is the hub replica's identity from the user agent
	// ("fleetdb-hub/<version> (<replica id>)"); "" for other clients.
	Replica  string
	Verb     string
	Object   string // resource[/subresource] namespace/name
	Resource string
	Code     int
	Received time.Time
}

// replicaInUserAgent takes the replica identity out of a hub user agent.
var replicaInUserAgent = regexp.MustCompile(`^fleetdb-hub/[^ ]* \(([^)]+)\)`)

// readAuditWrites reads every write request of an audit log (the local
// fleet's policy logs writes and watches, at the Metadata level).
func readAuditWrites(path string) ([]auditWrite, error) {
	return readAudit(path, "ResponseComplete", "create", "update", "patch", "delete", "deletecollection")
}

// readAuditWatches reads every watch an audit log saw start.
func readAuditWatches(path string) ([]auditWrite, error) {
	return readAudit(path, "ResponseStarted", "watch")
}

// readAudit reads the requests of an audit log with one of verbs at stage.
func readAudit(path, stage string, verbs ...string) ([]auditWrite, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []auditWrite
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var ev struct {
			Stage     string `json:"stage"`
			Verb      string `json:"verb"`
			UserAgent string `json:"userAgent"`
			ObjectRef *struct {
				Resource, Subresource, Namespace, Name string
			} `json:"objectRef"`
			ResponseStatus *struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
			RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if ev.Stage != stage || ev.ObjectRef == nil || !slices.Contains(verbs, ev.Verb) {
			continue
		}
		w := auditWrite{Verb: ev.Verb, Resource: ev.ObjectRef.Resource, Received: ev.RequestReceivedTimestamp}
		if m := replicaInUserAgent.FindStringSubmatch(ev.UserAgent); m != nil {
			w.Replica = m[1]
		}
		res := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			res += "/" + ev.ObjectRef.Subresource
		}
		w.Object = strings.TrimSpace(res + " " + strings.TrimPrefix(ev.ObjectRef.Namespace+"/"+ev.ObjectRef.Name, "/"))
		if ev.ResponseStatus != nil {
			w.Code = ev.ResponseStatus.Code
		}
		out = append(out, w)
	}
	return out, sc.Err()
}
