//go:build linux

package fixturecopy

import (
	"fmt"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends/hostlocal"
)

// pinSource opens the checked source directory once (O_PATH, final component
// not followed), re-checks where that descriptor really points, and returns a
// /proc/self/fd path to it: the copy then reads exactly the directory that was
// admitted, even if a path component is swapped for a symlink in between.
func pinSource(p plannedRoot) (string, func(), error) {
	fd, err := unix.Open(p.resolved, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, actuation.Wrapf(actuation.CodeRootInvalid, err, "source %q (%q)", p.source, p.resolved)
	}
	proc := fmt.Sprintf("/proc/self/fd/%d", fd)
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlink(proc, buf)
	if err != nil {
		unix.Close(fd)
		return "", nil, actuation.Wrapf(actuation.CodeRootInvalid, err, "source %q: cannot verify the opened directory (is /proc mounted?)", p.source)
	}
	actual := string(buf[:n])
	ok := false
	for _, a := range p.admitted {
		ok = ok || (a.Problem == "" && hostlocal.Within(actual, a.Resolved))
	}
	if !ok {
		unix.Close(fd)
		return "", nil, actuation.Refusef(actuation.CodeRootNotAdmitted, "source %q now resolves to %q, outside every admitted root", p.source, actual)
	}
	return proc, func() { unix.Close(fd) }, nil
}
