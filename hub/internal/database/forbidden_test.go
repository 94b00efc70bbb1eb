package database

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestForbiddenBackoff(t *testing.T) {
	r := newRefusals()
	key := types.NamespacedName{Namespace: "team-a", Name: "orders"}
	var got []time.Duration
	for range 7 {
		got = append(got, r.next("m1", key))
	}
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
	if d := r.next("m2", key); d != forbiddenRetryFirst {
		t.Fatalf("another member starts at %v, got %v", forbiddenRetryFirst, d)
	}
	r.clear("m1", key)
	if d := r.next("m1", key); d != forbiddenRetryFirst {
		t.Fatalf("after the member let the hub in: %v, want %v", d, forbiddenRetryFirst)
	}
	if keys := r.reset("m1"); len(keys) != 1 || keys[0] != key {
		t.Fatalf("reset: %v", keys)
	}
	if d := r.next("m1", key); d != forbiddenRetryFirst {
		t.Fatalf("after a reset: %v, want %v", d, forbiddenRetryFirst)
	}
}

func TestForbiddenMessageNamesTheLabel(t *testing.T) {
	err := errors.New(`rolebindings.rbac.authorization.k8s.io is forbidden: the fleetdb hub may write only in namespaces labelled fleetdb.io/managed-namespace=fleetdb (and never in kube-*); namespace team-a is not one`)
	msg := forbiddenMessage("team-a", err)
	for _, want := range []string{"kubectl label namespace team-a fleetdb.io/managed-namespace=fleetdb", "let fleetdb create it", "retried"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	if msg != forbiddenMessage("team-a", err) {
		t.Error("the message changes between retries")
	}
}
