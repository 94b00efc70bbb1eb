package localfleet

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// KillProcessesUnder sends SIGKILL to every process whose command line
// mentions dir (a folder unique to this run) and returns them as "pid
// command". It reads /proc, so it does nothing where there is none.
func KillProcessesUnder(dir string) []string {
	if dir == "" {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var killed []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(dir)) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			argv0, _, _ := bytes.Cut(cmdline, []byte{0})
			killed = append(killed, fmt.Sprintf("%d %s", pid, argv0))
		}
	}
	return killed
}

// TailFile returns at most the last n bytes of a file, starting at a line.
func TailFile(path string, n int64) string {
	fd, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return err.Error()
	}
	off := max(st.Size()-n, 0)
	if _, err := fd.Seek(off, io.SeekStart); err != nil {
		return err.Error()
	}
	r := bufio.NewReader(fd)
	if off > 0 {
		_, _ = r.ReadString('\n') // skip a partial line
	}
	b, _ := io.ReadAll(r)
	return string(b)
}
