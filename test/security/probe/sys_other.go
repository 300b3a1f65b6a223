//go:build !amd64

package main

// This architecture has only the *at forms of the path syscalls.
func sysChmod() (uintptr, bool) { return 0, false }
func sysOpen() (uintptr, bool)  { return 0, false }
func sysCreat() (uintptr, bool) { return 0, false }
func sysMkdir() (uintptr, bool) { return 0, false }
