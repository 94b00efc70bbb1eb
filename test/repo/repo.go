// Package repo finds the fleetdb checkout that tests and test programs run
// in: one helper instead of a copy per suite.
package repo

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// modulePath is the line of go.mod that names the fleetdb module.
const modulePath = "module github.com/fleetdb/fleetdb\n"

// Root is the folder of the fleetdb module's go.mod: the working directory
// or the nearest folder above it that holds it. `go test` runs a test in
// its package's folder, and the programs under test/ are run from the
// checkout (make bench, make chaos).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), modulePath) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the fleetdb repository (no go.mod of github.com/fleetdb/fleetdb above the working directory)")
		}
		dir = parent
	}
}

// RootT is Root for a test: it fails the test when there is none.
func RootT(t testing.TB) string {
	t.Helper()
	dir, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
