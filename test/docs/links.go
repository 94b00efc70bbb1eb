// Package docs checks the repository's Markdown: every relative link names a
// file or folder that exists, and every #anchor names a heading of its target.
// TestLinks runs it over every tracked .md file (part of `make test`).
package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// Problem is one dead link: where it is and why it is dead.
type Problem struct {
	File   string // slash path relative to the root
	Line   int
	Target string
	Reason string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Target, p.Reason)
}

// Check reads the Markdown files (slash paths relative to root) and returns
// every dead relative link in them, sorted by file and line. Links with a
// scheme (https:, mailto:, ...) are not followed.
func Check(root string, files []string) ([]Problem, error) {
	anchors := map[string]map[string]bool{} // slash path -> anchors, read on demand
	anchorsOf := func(rel string) (map[string]bool, error) {
		if a, ok := anchors[rel]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		a := Anchors(b)
		anchors[rel] = a
		return a, nil
	}
	var problems []Problem
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		for _, l := range Links(b) {
			if p, dead := check(root, f, l, anchorsOf); dead {
				problems = append(problems, p)
			}
		}
	}
	sort.SliceStable(problems, func(i, j int) bool {
		if problems[i].File != problems[j].File {
			return problems[i].File < problems[j].File
		}
		return problems[i].Line < problems[j].Line
	})
	return problems, nil
}

var scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// check resolves one link of file f; dead is true with the reason when it
// does not resolve.
func check(root, f string, l Link, anchorsOf func(string) (map[string]bool, error)) (p Problem, dead bool) {
	p = Problem{File: f, Line: l.Line, Target: l.Target}
	if scheme.MatchString(l.Target) || strings.HasPrefix(l.Target, "//") {
		return p, false
	}
	target, anchor, _ := strings.Cut(l.Target, "#")
	if q := strings.IndexByte(target, '?'); q >= 0 {
		target = target[:q]
	}
	if t, err := url.PathUnescape(target); err == nil {
		target = t
	}
	rel := f // a bare #anchor points into the file itself
	if target != "" {
		if strings.HasPrefix(target, "/") { // GitHub resolves /x from the repository root
			rel = strings.TrimPrefix(target, "/")
		} else {
			rel = filepath.ToSlash(filepath.Join(filepath.Dir(filepath.FromSlash(f)), filepath.FromSlash(target)))
		}
		if rel == ".." || strings.HasPrefix(rel, "../") {
			p.Reason = "points outside the repository"
			return p, true
		}
		st, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			p.Reason = "no such file or folder: " + rel
			return p, true
		}
		if st.IsDir() || anchor == "" {
			return p, false
		}
	}
	if anchor == "" || !strings.HasSuffix(strings.ToLower(rel), ".md") {
		return p, false // anchors of other files (code lines: #L10) are not checked
	}
	a, err := anchorsOf(rel)
	if err != nil {
		p.Reason = err.Error()
		return p, true
	}
	if anchor, err := url.PathUnescape(anchor); err == nil && a[strings.ToLower(anchor)] {
		return p, false
	}
	p.Reason = "no heading with anchor #" + anchor + " in " + rel
	return p, true
}

// Link is one link target and the line it is on.
type Link struct {
	Line   int
	Target string
}

var (
	// [text](target "title") and ![alt](target); text may hold one level
	// of brackets (an image inside a link).
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	// Reference definitions: [label]: target.
	refDef = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	// HTML links: <a href="..."> and <img src="...">.
	htmlLink  = regexp.MustCompile(`(?i)<(?:a|img)\s[^>]*?(?:href|src)\s*=\s*"([^"]*)"`)
	fenceOpen = regexp.MustCompile("^ {0,3}(```+|~~~+)")
)

// Links returns the link targets of a Markdown document outside code blocks
// and code spans. A link's text may wrap over lines.
func Links(md []byte) []Link {
	var links []Link
	lines := strings.Split(string(md), "\n")
	text := make([]string, len(lines)) // code blocks blanked out, line numbers kept
	forEachTextLine(md, func(n int, line string) {
		if m := refDef.FindStringSubmatch(line); m != nil {
			links = append(links, Link{n, strings.Trim(m[1], "<>")})
			return
		}
		text[n-1] = stripCodeSpans(line)
	})
	doc := strings.Join(text, "\n")
	lineAt := func(off int) int { return strings.Count(doc[:off], "\n") + 1 }
	for _, m := range inlineLink.FindAllStringSubmatchIndex(doc, -1) {
		if t := strings.Trim(doc[m[2]:m[3]], "<>"); t != "" {
			links = append(links, Link{lineAt(m[2]), t})
		}
	}
	for _, m := range htmlLink.FindAllStringSubmatchIndex(doc, -1) {
		links = append(links, Link{lineAt(m[2]), doc[m[2]:m[3]]})
	}
	sort.SliceStable(links, func(i, j int) bool { return links[i].Line < links[j].Line })
	return links
}

// stripCodeSpans blanks out the `code spans` of a line: a run of backticks up
// to the next run of the same length.
func stripCodeSpans(line string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(line, '`')
		if i < 0 {
			b.WriteString(line)
			return b.String()
		}
		b.WriteString(line[:i])
		n := i
		for n < len(line) && line[n] == '`' {
			n++
		}
		run := line[i:n]
		rest := line[n:]
		closed := false
		for off := 0; ; {
			j := strings.Index(rest[off:], run)
			if j < 0 {
				break
			}
			j += off
			k := j + len(run)
			if k < len(rest) && rest[k] == '`' { // a longer run: not the closing one
				for k < len(rest) && rest[k] == '`' {
					k++
				}
				off = k
				continue
			}
			line, closed = rest[k:], true
			break
		}
		if !closed { // an unmatched run is literal text
			b.WriteString(run)
			line = rest
		}
	}
}

// forEachTextLine calls fn with every line (numbered from 1) that is not in a
// fenced or indented code block.
func forEachTextLine(md []byte, fn func(n int, line string)) {
	sc := bufio.NewScanner(bytes.NewReader(md))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	fence := ""
	prevBlank := true
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if fence != "" {
			if strings.HasPrefix(strings.TrimLeft(line, " "), fence) {
				fence = ""
			}
			continue
		}
		if m := fenceOpen.FindStringSubmatch(line); m != nil {
			fence = m[1]
			continue
		}
		if prevBlank && strings.HasPrefix(line, "    ") && strings.TrimSpace(line) != "" {
			continue // an indented code block (approximate: list continuations are rare here)
		}
		prevBlank = strings.TrimSpace(line) == ""
		fn(n, line)
	}
}

var (
	atxHeading    = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	setextLine    = regexp.MustCompile(`^ {0,3}(=+|-+)\s*$`)
	htmlAnchor    = regexp.MustCompile(`(?i)<a\s[^>]*?(?:name|id)\s*=\s*"([^"]*)"`)
	mdLinkText    = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag       = regexp.MustCompile(`<[^>]+>`)
	emphasisMarks = strings.NewReplacer("`", "", "*", "")
)

// Anchors returns the anchors GitHub gives the headings of a Markdown
// document (and explicit <a name/id> anchors).
func Anchors(md []byte) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	add := func(text string) {
		slug := Slug(text)
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	prev := ""
	forEachTextLine(md, func(_ int, line string) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[strings.ToLower(m[1])] = true
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			add(m[1])
			prev = ""
			return
		}
		if setextLine.MatchString(line) && strings.TrimSpace(prev) != "" &&
			!strings.HasPrefix(strings.TrimSpace(prev), "|") && !strings.HasPrefix(strings.TrimSpace(prev), "-") {
			add(prev)
			prev = ""
			return
		}
		prev = line
	})
	return out
}

// Slug is GitHub's anchor for a heading's text: the rendered text in lower
// case, every character that is not a letter, a digit, a space, '-' or '_'
// dropped, spaces turned into '-'.
func Slug(heading string) string {
	text := mdLinkText.ReplaceAllString(heading, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	text = emphasisMarks.Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
