package sandboxhelper

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// Stat is the subset of /proc/<pid>/stat the runtime relies on.
type Stat struct {
	Pid   int
	State byte // R, S, D, Z, ...
	Ppid  int
	Pgid  int
	Sid   int
	// StartTime is field 22: clock ticks since boot at which the process
	// started. (Pid, StartTime) identifies a process across pid reuse and is
	// what the crash-recovery sweep records.
	StartTime uint64
}

// ReadStat parses /proc/<pid>/stat.
func ReadStat(pid int) (Stat, error) {
	return readStat("/proc/"+strconv.Itoa(pid)+"/stat", pid)
}

// ReadTaskStat parses /proc/<pid>/task/<tid>/stat: one thread's state (its Pid is tid).
func ReadTaskStat(pid, tid int) (Stat, error) {
	return readStat("/proc/"+strconv.Itoa(pid)+"/task/"+strconv.Itoa(tid)+"/stat", tid)
}

func readStat(path string, id int) (Stat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Stat{}, fmt.Errorf("read %s: %w", path, err)
	}
	return parseStat(id, b)
}

func parseStat(pid int, b []byte) (Stat, error) {
	// The command name (field 2) is parenthesised and may itself contain
	// spaces and parentheses: split after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return Stat{}, fmt.Errorf("parse /proc/%d/stat: no command terminator", pid)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); field N is f[N-3].
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	num := func(field int) (int64, error) {
		return strconv.ParseInt(string(f[field-3]), 10, 64)
	}
	ppid, err1 := num(4)
	pgid, err2 := num(5)
	sid, err3 := num(6)
	st, err4 := strconv.ParseUint(string(f[22-3]), 10, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return Stat{}, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	return Stat{Pid: pid, State: f[0][0], Ppid: int(ppid), Pgid: int(pgid), Sid: int(sid), StartTime: st}, nil
}
