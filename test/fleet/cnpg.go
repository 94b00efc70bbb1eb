package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// cnpgModule is CloudNativePG's Go module, pinned in test/tools/cnpg/go.mod.
const cnpgModule = "github.com/cloudnative-pg/cloudnative-pg"

var (
	cnpgOnce sync.Once
	cnpgDir  string
	cnpgErr  error
)

// CNPGModuleDir returns the module cache folder of the CloudNativePG version
// pinned in test/tools/cnpg, downloading the module on first use (through
// the Go module proxy, like every other dependency).
func CNPGModuleDir() (string, error) {
	cnpgOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", cnpgModule)
		cmd.Dir = filepath.Join(RepoRoot(), "test", "tools", "cnpg")
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			cnpgErr = fmt.Errorf("downloading %s: %w: %s%s", cnpgModule, err, out, stderr.String())
			return
		}
		var info struct{ Dir, Error string }
		if err := json.Unmarshal(out, &info); err != nil {
			cnpgErr = fmt.Errorf("downloading %s: %w", cnpgModule, err)
			return
		}
		if info.Dir == "" {
			cnpgErr = fmt.Errorf("downloading %s: %s", cnpgModule, info.Error)
			return
		}
		cnpgDir = info.Dir
	})
	return cnpgDir, cnpgErr
}

// CNPGClusterCRD is the path of CloudNativePG's Cluster CRD in the module cache.
func CNPGClusterCRD() (string, error) {
	dir, err := CNPGModuleDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "config", "crd", "bases", "postgresql.cnpg.io_clusters.yaml"), nil
}
