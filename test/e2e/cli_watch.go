package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"github.com/creack/pty"
	. "github.com/onsi/gomega" //nolint:staticcheck // ST1001: gomega's DSL reads as assertions, as in Cluster API's test/framework
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// syncBuffer is a buffer written by one goroutine and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// colourReady is how status colours a Ready phase on a terminal.
const colourReady = "\x1b[32mReady\x1b[0m"

// CLIWatchSpec runs `kubectl fleetdb status --watch` on a pseudo-terminal
// and piped, and proves: on the terminal the output is coloured (and not
// with NO_COLOR), piped it has no escape codes at all; in both a Database
// created meanwhile shows up without restarting the command; Ctrl-C (SIGINT)
// ends it with exit code 0.
func CLIWatchSpec(ctx context.Context, in CLIInput) {
	t, f := in.T, in.Fleet
	g := NewWithT(t)
	ns := CreateNamespace(ctx, CreateNamespaceInput{T: t, Fleet: f, Prefix: "e2e-cli-watch"})
	DumpOnFailure(t, f, ns)
	first := f.Members[0].Name
	db := NewDatabase(ns, "watched-a", 1, []string{first})
	g.Expect(f.Hub.Client.Create(ctx, db)).To(Succeed())
	WaitForDatabaseReady(ctx, WaitForDatabaseReadyInput{T: t, Fleet: f, Key: client.ObjectKeyFromObject(db), Members: []string{first}, Replicas: 1})
	args := []string{"--kubeconfig", f.Hub.Kubeconfig, "status", "-n", ns}

	// A terminal: coloured, redrawn (the screen cleared) when a Database appears.
	cmd := exec.CommandContext(ctx, in.CLI, append(args, "--watch")...)
	cmd.Env = withoutEnv(os.Environ(), "NO_COLOR")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 50, Cols: 200})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = tty.Close() }()
	var screen syncBuffer
	go func() { _, _ = io.Copy(&screen, tty) }() // ends with EIO when the command exits
	eventually := func(what string, cond func(g Gomega)) {
		t.Helper()
		NewWithT(t).Eventually(cond).WithContext(ctx).WithTimeout(f.Intervals.Ready).WithPolling(f.Intervals.Poll).Should(Succeed(), what)
	}
	eventually("the first screen", func(g Gomega) {
		g.Expect(screen.String()).To(ContainSubstring("watched-a"))
		g.Expect(screen.String()).To(ContainSubstring(colourReady), "a Ready phase is green on a terminal")
		g.Expect(screen.String()).To(ContainSubstring("\x1b[H\x1b[2J"), "the screen is cleared before a redraw")
	})
	g.Expect(f.Hub.Client.Create(ctx, NewDatabase(ns, "watched-b", 1, []string{first}))).To(Succeed())
	eventually("the new Database on the terminal", func(g Gomega) { g.Expect(screen.String()).To(ContainSubstring("watched-b")) })
	g.Expect(cmd.Process.Signal(syscall.SIGINT)).To(Succeed())
	g.Expect(cmd.Wait()).To(Succeed(), "Ctrl-C ends --watch with exit code 0")

	// NO_COLOR on a terminal: no colour.
	cmd = exec.CommandContext(ctx, in.CLI, args...)
	cmd.Env = append(withoutEnv(os.Environ(), "NO_COLOR"), "NO_COLOR=1")
	tty2, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 50, Cols: 200})
	g.Expect(err).NotTo(HaveOccurred())
	var plainScreen syncBuffer
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&plainScreen, tty2); close(copied) }()
	g.Expect(cmd.Wait()).To(Succeed())
	<-copied
	_ = tty2.Close()
	g.Expect(plainScreen.String()).To(ContainSubstring("watched-b"))
	g.Expect(plainScreen.String()).NotTo(ContainSubstring("\x1b["), "NO_COLOR: no escape codes")

	// Piped: plain text, the whole view printed again on a change.
	cmd = exec.CommandContext(ctx, in.CLI, append(args, "--watch")...)
	cmd.Env = withoutEnv(os.Environ(), "NO_COLOR")
	var piped syncBuffer
	cmd.Stdout, cmd.Stderr = &piped, &piped
	g.Expect(cmd.Start()).To(Succeed())
	eventually("the first view, piped", func(g Gomega) { g.Expect(piped.String()).To(ContainSubstring("watched-b")) })
	g.Expect(f.Hub.Client.Create(ctx, NewDatabase(ns, "watched-c", 1, []string{first}))).To(Succeed())
	eventually("the new Database, piped", func(g Gomega) { g.Expect(piped.String()).To(ContainSubstring("watched-c")) })
	g.Expect(cmd.Process.Signal(syscall.SIGINT)).To(Succeed())
	err = cmd.Wait()
	var exit *exec.ExitError
	g.Expect(errors.As(err, &exit)).To(BeFalse(), "Ctrl-C ends a piped --watch with exit code 0: %v", err)
	g.Expect(piped.String()).NotTo(ContainSubstring("\x1b["), "no escape codes when piped")
	g.Expect(strings.Count(piped.String(), "MEMBER ")).To(BeNumerically(">=", 2), "the view is printed again after the change")
}

func withoutEnv(env []string, key string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, key+"=") {
			out = append(out, e)
		}
	}
	return out
}
