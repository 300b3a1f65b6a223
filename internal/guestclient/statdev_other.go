//go:build !linux

package guestclient

import "syscall"

// statDev widens Stat_t.Dev (int32 on darwin) to the Endpoint's uint64 the way
// vfkitsystem's FileIdentity does (plain conversion), so a pinned identity compares equal.
func statDev(st *syscall.Stat_t) uint64 { return uint64(st.Dev) }
