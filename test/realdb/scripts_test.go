package realdb

import (
	"testing"
	"time"
)

// TestPrintedDir is the guard on what the build-and-print scripts' callers
// parse: one line, an absolute path of an existing folder, and nothing else
// (a cold build's progress messages once reached the path, "file name too
// long").
func TestPrintedDir(t *testing.T) {
	dir := t.TempDir()
	if got, err := printedDir(dir + "\n"); err != nil || got != dir {
		t.Errorf("printedDir(one folder) = %q, %v; want %q", got, err, dir)
	}
	for name, out := range map[string]string{
		"progress before the folder": "realnode-images: building ...\n" + dir + "\n",
		"progress after the folder":  dir + "\nrealnode-images: built in 3s\n",
		"nothing":                    "",
		"a relative path":            "cache/tools\n",
		"a missing folder":           dir + "/missing\n",
	} {
		if got, err := printedDir(out); err == nil {
			t.Errorf("%s: printedDir accepted %q as %q", name, out, got)
		}
	}
}

// TestBuildScriptsPrintOneFolder runs the build-and-print scripts as their
// callers do: standard output must be the folder alone, also on the run that
// builds (the real-node images only where real nodes run: they need root).
func TestBuildScriptsPrintOneFolder(t *testing.T) {
	ctx := t.Context()
	scriptDir(ctx, t, 30*time.Minute, "toolchain.sh")
	requireRealNodes(t)
	for _, name := range []string{"realnode-tools.sh", "realnode-images.sh"} {
		scriptDir(ctx, t, 60*time.Minute, name)
	}
}
