package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetdb/fleetdb/test/repo"
)

// TestLinks: no tracked (or new, not ignored) Markdown file of the repository
// has a dead relative link or a dead #anchor.
func TestLinks(t *testing.T) {
	root := repo.RootT(t)
	files := markdownFiles(t, root)
	if len(files) < 10 {
		t.Fatalf("found only %d Markdown files under %s: %v", len(files), root, files)
	}
	problems, err := Check(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestCheck proves the check on a tree of its own: each case is one file
// linking somewhere, and the dead links are exactly the ones reported.
func TestCheck(t *testing.T) {
	tree := map[string]string{
		"README.md": "# fleetdb\n\n## The two commands\n\n## Run it (`make run`)\n\n## Run it (`make run`)\n",
		"docs/topic.md": "# A topic\n\nSetext heading\n--------------\n\n### Backups and the final backup\n\n" +
			"<a id=\"custom\"></a>\n\n## Ünïcode: déjà vu!\n\n## `--sharding`, experimental\n",
		"docs/img.png":   "png",
		"docs/sub/x.txt": "x",
	}
	cases := []struct {
		name string
		link string // the body of docs/case.md
		dead string // the reason's start; "" when the link is fine
	}{
		{"file", "[t](topic.md)", ""},
		{"file and anchor", "[t](topic.md#backups-and-the-final-backup)", ""},
		{"setext anchor", "[t](topic.md#setext-heading)", ""},
		{"html anchor", "[t](topic.md#custom)", ""},
		{"unicode anchor", "[t](topic.md#ünïcode-déjà-vu)", ""},
		{"code in heading", "[t](topic.md#--sharding-experimental)", ""},
		{"upper-case anchor", "[t](topic.md#Backups-And-The-Final-Backup)", ""},
		{"parent", "[t](../README.md#the-two-commands)", ""},
		{"duplicate heading", "[t](../README.md#run-it-make-run-1)", ""},
		{"root-relative", "[t](/README.md#run-it-make-run)", ""},
		{"folder", "[t](sub/)", ""},
		{"image", "![i](img.png)", ""},
		{"reference definition", "[t][r]\n\n[r]: topic.md#custom", ""},
		{"html link", `<a href="topic.md">t</a>`, ""},
		{"external", "[t](https://example.com/nope.md#nope)", ""},
		{"mailto", "[t](mailto:a@example.com)", ""},
		{"same file", "# Here\n\n[t](#here)", ""},
		{"in a code block", "```\n[t](missing.md)\n```", ""},
		{"in a code span", "`[t](missing.md)`", ""},
		{"title", `[t](topic.md "A topic")`, ""},
		{"wrapped text", "[two\nlines](topic.md)", ""},

		{"missing file", "[t](missing.md)", "no such file"},
		{"missing image", "![i](images/missing.png)", "no such file"},
		{"missing anchor", "[t](topic.md#no-such-heading)", "no heading with anchor"},
		{"anchor with punctuation kept", "[t](topic.md#backups-and-the-final-backup.)", "no heading with anchor"},
		{"duplicate not numbered", "[t](../README.md#run-it-make-run-2)", "no heading with anchor"},
		{"missing same-file anchor", "[t](#nowhere)", "no heading with anchor"},
		{"missing reference target", "[t][r]\n\n[r]: gone.md", "no such file"},
		{"missing html target", `<img src="gone.png">`, "no such file"},
		{"outside the repository", "[t](../../etc/passwd)", "points outside"},
		{"wrapped text, dead", "see [the\ntopic](topics.md)", "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range tree {
				write(t, dir, name, body)
			}
			write(t, dir, "docs/case.md", c.link+"\n")
			problems, err := Check(dir, []string{"README.md", "docs/topic.md", "docs/case.md"})
			if err != nil {
				t.Fatal(err)
			}
			if c.dead == "" {
				if len(problems) != 0 {
					t.Fatalf("want no dead link, got %v", problems)
				}
				return
			}
			if len(problems) != 1 || problems[0].File != "docs/case.md" || !strings.HasPrefix(problems[0].Reason, c.dead) {
				t.Fatalf("want one dead link in docs/case.md (%s...), got %v", c.dead, problems)
			}
		})
	}
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Primary/standby topology": "primarystandby-topology",
		"Sharding over replicas (`--sharding`, experimental, off by default)": "sharding-over-replicas---sharding-experimental-off-by-default",
		"The hub's identity and two replicas":                                 "the-hubs-identity-and-two-replicas",
		"fleetdb.io/v1alpha1":                                                 "fleetdbiov1alpha1",
		"The figure: create → CloudNativePG Cluster in member":                "the-figure-create--cloudnativepg-cluster-in-member",
		"A [linked](x.md) heading":                                            "a-linked-heading",
		"snake_case stays":                                                    "snake_case-stays",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// markdownFiles lists the repository's .md files git knows or would add
// (tracked, and untracked but not ignored), as slash paths. Without git (a
// source archive) it walks the tree, leaving out hidden and build folders.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", "*.md")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Logf("git ls-files: %v; walking the tree instead", err)
		return walkMarkdown(t, root)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			continue // deleted in the work tree, not yet in the index
		}
		files = append(files, f)
	}
	return files
}

func walkMarkdown(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && p != root && (strings.HasPrefix(name, ".") || name == "_output" || name == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestREADMEFitsOnAFewScreens keeps the README short, with the two commands
// on its first screen; everything else belongs on a page under docs/.
func TestREADMEFitsOnAFewScreens(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repo.RootT(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 150 {
		t.Errorf("README.md has %d lines, want at most 150: move the detail to a page under docs/", len(lines))
	}
	first := strings.Join(lines[:min(40, len(lines))], "\n")
	for _, cmd := range []string{"`make run`", "`make test`"} {
		if !strings.Contains(first, cmd) {
			t.Errorf("README.md does not name %s in its first 40 lines", cmd)
		}
	}
}
