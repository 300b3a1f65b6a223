package main

import "golang.org/x/sys/unix"

// The legacy path syscalls amd64 still has (arm64 has only the *at forms).
func sysChmod() (uintptr, bool) { return unix.SYS_CHMOD, true }
func sysOpen() (uintptr, bool)  { return unix.SYS_OPEN, true }
func sysCreat() (uintptr, bool) { return unix.SYS_CREAT, true }
func sysMkdir() (uintptr, bool) { return unix.SYS_MKDIR, true }
