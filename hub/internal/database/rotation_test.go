package database

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/fleetdb/fleetdb/member"
)

func TestRotationBackoff(t *testing.T) {
	g := NewWithT(t)
	g.Expect(rotationBackoff(1)).To(Equal(rotationRetryBase))
	g.Expect(rotationBackoff(2)).To(Equal(2 * rotationRetryBase))
	g.Expect(rotationBackoff(3)).To(Equal(4 * rotationRetryBase))
	g.Expect(rotationBackoff(100)).To(Equal(rotationRetryMax))
	g.Expect(rotationRetryMax).To(BeNumerically(">=", time.Minute))
}

// A hub Secret recovered from a member mid-rotation keeps the rotation, and
// its password is the one the members that did not switch yet run on.
func TestRecoverableCredentials(t *testing.T) {
	g := NewWithT(t)
	switched := map[string][]byte{
		member.CredentialsUsernameKey:         []byte("app"),
		member.CredentialsPasswordKey:         []byte("new"),
		member.CredentialsPreviousPasswordKey: []byte("old"),
		member.CredentialsPendingPasswordKey:  []byte("new"),
		member.CredentialsRotationTokenKey:    []byte("t1"),
		member.CredentialsRootPasswordKey:     []byte("root"),
		"unrelated":                           []byte("x"),
	}
	g.Expect(recoverableCredentials(switched)).To(Equal(map[string][]byte{
		member.CredentialsUsernameKey:        []byte("app"),
		member.CredentialsPasswordKey:        []byte("old"),
		member.CredentialsPendingPasswordKey: []byte("new"),
		member.CredentialsRotationTokenKey:   []byte("t1"),
		member.CredentialsRootPasswordKey:    []byte("root"),
	}))
	plain := map[string][]byte{member.CredentialsUsernameKey: []byte("app"), member.CredentialsPasswordKey: []byte("pw")}
	g.Expect(recoverableCredentials(plain)).To(Equal(plain))
}
