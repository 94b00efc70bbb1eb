package hub

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestLeaderElectionValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		le   LeaderElection
		want string // error substring; "" for valid
	}{
		{name: "defaults", le: LeaderElection{}},
		{name: "short", le: LeaderElection{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second}},
		{name: "renew not under lease", le: LeaderElection{LeaseDuration: 10 * time.Second, RenewDeadline: 10 * time.Second}, want: "longer than the renew deadline"},
		{name: "retry too long", le: LeaderElection{RetryPeriod: 9 * time.Second}, want: "times the retry period"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.le.withDefaults().validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("want an error with %q, got %v", tc.want, err)
			}
		})
	}
}

func TestReplicaIdentity(t *testing.T) {
	a, err := NewReplicaID("hub-0")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewReplicaID("hub-0")
	if a == b {
		t.Fatalf("two replicas of one name got the same identity %q", a)
	}
	if !regexp.MustCompile(`^hub-0_[0-9a-f-]{36}$`).MatchString(a) {
		t.Fatalf("identity %q is not <name>_<uuid>", a)
	}
	if ua := UserAgent("v1.2.3", a); ua != "fleetdb-hub/v1.2.3 ("+a+")" {
		t.Fatalf("user agent %q", ua)
	}
	if host, _ := NewReplicaID(""); strings.HasPrefix(host, "_") {
		t.Fatalf("no host name in %q", host)
	}
}
