// Package storm holds the programs a cgroup test binary runs as the program inside a group
// (a fork storm, a memory storm). It imports nothing of the product, so the cgroups
// package's own tests use it too.
package storm

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Fork makes n fork+exec attempts of a sleeper (/bin/sleep 300) with attr, counting
// those the kernel refuses with EAGAIN (the pids limit). Another fork error ends it.
func Fork(n int, attr *syscall.ProcAttr) (started, refused int, err error) {
	for i := 0; i < n; i++ {
		_, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "300"}, attr)
		switch {
		case err == nil:
			started++
		case errors.Is(err, syscall.EAGAIN):
			refused++
		default:
			return started, refused, err
		}
	}
	return started, refused, nil
}

// ForkStorm is the fork storm program: 200 attempts (Fork) with stdio on /dev/null,
// printing "started=<n> refused=<n>". It returns its exit code: 0, 4 without /dev/null,
// 5 on another fork error.
func ForkStorm() int {
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return 4
	}
	fd := devnull.Fd()
	started, refused, err := Fork(200, &syscall.ProcAttr{Files: []uintptr{fd, fd, fd}})
	if err != nil {
		fmt.Println("fork error", err)
		return 5
	}
	fmt.Printf("started=%d refused=%d\n", started, refused)
	return 0
}

// allocSink holds Alloc's chunks so none can be freed before the memory limit is hit.
var allocSink [][]byte

// Alloc touches memory in 16 MiB chunks, all kept reachable, up to 64 GiB: the memory
// limit of its group must end it first. If it survives it prints "alloc survived <n>" and
// returns 0.
func Alloc() int {
	for i := 0; i < 4096; i++ {
		c := make([]byte, 16<<20)
		for j := 0; j < len(c); j += 4096 {
			c[j] = 1
		}
		allocSink = append(allocSink, c)
	}
	fmt.Println("alloc survived", len(allocSink))
	return 0
}
