package manifests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCloudNativePGPinsAgree: the CloudNativePG release whose CRDs the tests
// and the kwok fleet install (test/tools/cnpg) is the release the real-node
// fleet builds its operator from (test/tools/cnpgoperator).
func TestCloudNativePGPinsAgree(t *testing.T) {
	const module = "github.com/cloudnative-pg/cloudnative-pg"
	pin := func(dir string) string {
		b, err := os.ReadFile(filepath.Join("..", "tools", dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
			if len(f) >= 2 && f[0] == module {
				return f[1]
			}
		}
		t.Fatalf("test/tools/%s/go.mod requires no %s", dir, module)
		return ""
	}
	if a, b := pin("cnpg"), pin("cnpgoperator"); a != b {
		t.Fatalf("test/tools/cnpg pins CloudNativePG %s, test/tools/cnpgoperator %s: they must agree", a, b)
	}
}
