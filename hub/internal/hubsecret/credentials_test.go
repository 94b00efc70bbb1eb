package hubsecret

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/fleetdb/fleetdb/member"
)

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
	g.Expect(RecoverableCredentials(switched)).To(Equal(map[string][]byte{
		member.CredentialsUsernameKey:        []byte("app"),
		member.CredentialsPasswordKey:        []byte("old"),
		member.CredentialsPendingPasswordKey: []byte("new"),
		member.CredentialsRotationTokenKey:   []byte("t1"),
		member.CredentialsRootPasswordKey:    []byte("root"),
	}))
	plain := map[string][]byte{member.CredentialsUsernameKey: []byte("app"), member.CredentialsPasswordKey: []byte("pw")}
	g.Expect(RecoverableCredentials(plain)).To(Equal(plain))
}
