package main

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
)

// ANSI colours; used only when colour is on.
const (
	green  = "\x1b[32m"
	yellow = "\x1b[33m"
	red    = "\x1b[31m"
	bold   = "\x1b[1m"
	reset  = "\x1b[0m"
)

// cell is one table cell, optionally coloured.
type cell struct{ text, colour string }

func plain(s string) cell { return cell{text: s} }

// table is a kubectl-like table: columns padded to their widest cell and
// separated by three spaces. Colour codes are added after the padding, so
// columns line up with and without them.
type table struct {
	header []string
	rows   [][]cell
}

func (t *table) add(cells ...cell) { t.rows = append(t.rows, cells) }

func (t *table) render(w io.Writer, colour bool) {
	// Cells hold what others wrote (a member's error answer in a
	// MemberCluster message): no escape sequence of theirs reaches the terminal.
	for _, r := range t.rows {
		for i := range r {
			r[i].text = printers.EscapeTerminal(r[i].text)
		}
	}
	widths := make([]int, len(t.header))
	for i, h := range t.header {
		widths[i] = utf8.RuneCountInString(h)
	}
	for _, r := range t.rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c.text))
		}
	}
	line := func(cells []cell, headerRow bool) {
		var b strings.Builder
		for i, c := range cells {
			text := c.text
			if i < len(cells)-1 {
				text += strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c.text)+3)
			}
			switch {
			case colour && headerRow:
				text = bold + strings.TrimRight(text, " ") + reset + text[len(strings.TrimRight(text, " ")):]
			case colour && c.colour != "":
				trimmed := strings.TrimRight(text, " ")
				text = c.colour + trimmed + reset + text[len(trimmed):]
			}
			b.WriteString(text)
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	hdr := make([]cell, len(t.header))
	for i, h := range t.header {
		hdr[i] = plain(h)
	}
	line(hdr, true)
	for _, r := range t.rows {
		line(r, false)
	}
}

// age is a duration as kubectl prints ages (its own HumanDuration: 42s,
// 5m30s, 3h, 2d4h, 3y); "-" for never.
func age(since time.Time, now time.Time) string {
	if since.IsZero() {
		return "-"
	}
	return duration.HumanDuration(max(now.Sub(since), 0))
}
