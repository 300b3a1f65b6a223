// Command forkstorm is the program of the node agent's cgroup test: it starts a setsid'd
// daemon (its own session and process group), then tries to start N background
// sleepers, counting the forks the kernel refuses, prints both counts and exits, leaving
// everything it started behind.
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"sensorium.dev/workbench/internal/test/storm"
)

func main() {
	n := 200
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		os.Exit(2)
	}
	fd := devnull.Fd()
	attr := &syscall.ProcAttr{Files: []uintptr{fd, fd, fd}}
	daemon := &syscall.ProcAttr{Files: []uintptr{fd, fd, fd}, Sys: &syscall.SysProcAttr{Setsid: true}}
	if _, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "300"}, daemon); err != nil {
		fmt.Println("daemon:", err)
		os.Exit(3)
	}
	started, refused, err := storm.Fork(n, attr)
	if err != nil {
		fmt.Println("fork:", err)
		os.Exit(4)
	}
	fmt.Printf("started=%d refused=%d\n", started, refused)
}
