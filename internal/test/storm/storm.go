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

// Fork makes 200 fork+exec attempts of a sleeper and prints
// "started=<n> refused=<n>", counting as refused those the kernel refuses with EAGAIN (the
// pids limit). It returns the exit code of the storm: 0, 4 without /dev/null, 5 on another
// fork error.
func Fork() int {
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return 4
	}
	fd := devnull.Fd()
	started, refused := 0, 0
	for i := 0; i < 200; i++ {
		_, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "300"}, &syscall.ProcAttr{Files: []uintptr{fd, fd, fd}})
		switch {
		case err == nil:
			started++
		case errors.Is(err, syscall.EAGAIN):
			refused++
		default:
			fmt.Println("fork error", err)
			return 5
		}
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
