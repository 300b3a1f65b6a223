package nodeagent

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the kernel's USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on every
// Linux this runs on).
const clockTick = 100

// treeCPU is the CPU time (user + system, including reaped children) used so far by this
// process and every live process below it: the benchmark, the manager and the node agent
// (this process), the test API server and etcd, and the sandbox helpers. Two readings
// around a phase give what the phase cost the machine, whichever component spent it.
// Outside Linux (no /proc) it is zero.
func treeCPU() time.Duration {
	var total time.Duration
	for _, d := range treeCPUByName() {
		total += d
	}
	return total
}

// treeCPUByName is treeCPU by process name (/proc/<pid>/stat's comm); what the processes of
// the tree reaped (exited sandboxes and their helpers) is under "reaped".
func treeCPUByName() map[string]time.Duration {
	out := map[string]time.Duration{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	type proc struct {
		ppid, ticks, reaped int
		name                string
	}
	procs := map[int]proc{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// The command name may hold spaces: the fields start after its closing parenthesis.
		s := string(raw)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		field := func(i int) int { v, _ := strconv.Atoi(f[i]); return v }
		name := s[strings.IndexByte(s, '(')+1 : strings.LastIndexByte(s, ')')]
		procs[pid] = proc{ppid: ppid, ticks: field(11) + field(12), reaped: field(13) + field(14), name: name} // utime+stime, cutime+cstime
	}
	self := os.Getpid()
	tick := time.Second / clockTick
	for pid, p := range procs {
		for q, hops := pid, 0; hops < 64; hops++ {
			if q == self {
				out[p.name] += time.Duration(p.ticks) * tick
				out["reaped"] += time.Duration(p.reaped) * tick
				break
			}
			next, ok := procs[q]
			if !ok || q <= 1 {
				break
			}
			q = next.ppid
		}
	}
	return out
}

// machineCPU is the machine's busy and total CPU time so far, all cores and all processes
// (/proc/stat's first line: busy is everything but idle and iowait). Two readings around a
// phase give the fraction of the machine that was busy during it: near 1, the phase was
// bound by CPU, whatever ran concurrently. Outside Linux both are zero.
func machineCPU() (busy, total int64) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	for i, s := range f[1:] {
		v, _ := strconv.ParseInt(s, 10, 64)
		if i >= 8 { // guest and guest_nice are already counted in user and nice
			break
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}
