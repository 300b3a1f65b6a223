//go:build linux

package guestclient

import "syscall"

func statDev(st *syscall.Stat_t) uint64 { return st.Dev }
