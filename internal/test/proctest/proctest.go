// Package proctest finds live processes on this host by their /proc entries, for the
// tests that check which processes a sandbox, a session, an agent or a VM left behind.
package proctest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Pids lists the processes now in /proc.
func Pids() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out, err
}

// pids is Pids without its error: a scan that cannot read /proc finds nothing.
func pids() []int {
	out, _ := Pids()
	return out
}

// Path is the path of name (cmdline, exe, stat, fd, ...) in pid's /proc directory.
func Path(pid int, name string) string {
	return filepath.Join("/proc", strconv.Itoa(pid), name)
}

// Matching returns the pids of the processes whose command line (/proc/PID/cmdline:
// the argv atoms, each ended by a NUL) satisfies match. A process that ends during the
// scan is passed over.
func Matching(match func(pid int, cmdline []byte) bool) []int {
	var out []int
	for _, pid := range pids() {
		b, err := os.ReadFile(Path(pid, "cmdline"))
		if err == nil && match(pid, b) {
			out = append(out, pid)
		}
	}
	return out
}

// WithArg returns the pids of the processes with s anywhere in their command line (a
// caller may include the NUL separators to match whole atoms).
func WithArg(s string) []int {
	return Matching(func(_ int, cmdline []byte) bool { return bytes.Contains(cmdline, []byte(s)) })
}

// Exactly returns the pids of the processes whose argv is exactly argv (zombies
// included: a zombie keeps no command line, so it never matches a non-empty argv).
func Exactly(argv ...string) []int {
	want := strings.Join(argv, "\x00") + "\x00"
	return Matching(func(_ int, cmdline []byte) bool { return string(cmdline) == want })
}

// Live reports whether pid is alive and not a zombie (its /proc/PID/stat reads, with a
// state other than Z).
func Live(pid int) bool {
	st, err := os.ReadFile(Path(pid, "stat"))
	return err == nil && !strings.Contains(string(st), ") Z ")
}
