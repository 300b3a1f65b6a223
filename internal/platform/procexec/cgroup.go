package procexec

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/cgroups"
)

// CgroupReport is what the command's cgroup said at teardown: whether anything was
// left when the program ended (and what the kill found), and the limits it hit.
type CgroupReport struct {
	// Group is the cgroup's path under the hierarchy roots ("workbench/cmd-<id>").
	Group string
	// Limits are the limits the group enforced.
	Limits cgroups.Limits
	// Kill is what the teardown kill found: processes still alive in the group once the
	// program's main process had ended (setsid'd or double-forked daemons included).
	Kill cgroups.KillReport
	// Stats are the group's counters read before it was removed.
	Stats cgroups.Stats
	// Removed is true when the group's directories were removed.
	Removed bool
}

// Summary renders the report for an outcome message: what the kill found, the limits
// that were hit.
func (r *CgroupReport) Summary() string {
	if r == nil {
		return ""
	}
	parts := []string{}
	if s := r.Stats.Summary(); s != "" {
		parts = append(parts, s)
	}
	if r.Kill.Found > 0 || !r.Kill.Empty {
		parts = append(parts, r.Kill.Summary())
	}
	return strings.Join(parts, "; ")
}

// ResolveLimits applies the command defaults to the zero fields of l: pids
// cgroups.DefaultCommandPids, memory cgroups.DefaultCommandMemoryBytes; CPU stays
// unlimited unless set.
func ResolveLimits(l cgroups.Limits) cgroups.Limits {
	if l.Pids == 0 {
		l.Pids = cgroups.DefaultCommandPids
	}
	if l.MemoryBytes == 0 {
		l.MemoryBytes = cgroups.DefaultCommandMemoryBytes
	}
	return l
}

// CreateCgroup creates the cgroup of one process tree of kind with limits (defaults
// applied). An unavailable controller or a group that cannot be created is a refusal
// (cgroup-unavailable): nothing runs unconfined. An empty id selects a random one.
func CreateCgroup(m *cgroups.Manager, kind cgroups.Kind, id string, l cgroups.Limits) (*cgroups.Group, error) {
	if id == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	g, err := m.Create(kind, id, ResolveLimits(l))
	switch {
	case errors.Is(err, cgroups.ErrInvalid):
		return nil, actuation.Refusef(actuation.CodeInvalidSpec, "%v", err)
	case err != nil:
		return nil, actuation.Refusef(actuation.CodeCgroupUnavailable, "%v", err)
	}
	return g, nil
}

// EnterCgroup moves the just-started sandbox helper into g. It runs before the helper
// receives its configuration, and the helper does nothing before that, so every process
// of the command is born inside the group.
func EnterCgroup(g *cgroups.Group, pid int) error {
	if err := g.Add(pid); err != nil {
		return actuation.Refusef(actuation.CodeCgroupUnavailable, "move the sandbox helper (pid %d) into its cgroup: %v", pid, err)
	}
	return nil
}

// KillCgroup kills whatever is left in g once the program's main process has ended
// (the leader, an unreaped zombie, is not a member any more) and reaps the killed
// processes that are this process's children (orphans re-parented to the subreaper).
// Killed members of the leader's process group are left for ReapGroup, which collects
// their statuses. It never blocks beyond the cgroups package's kill bound. Call
// RemoveCgroup once the leader's group is reaped: a cgroup cannot be removed while
// zombies of it are unreaped.
func KillCgroup(g *cgroups.Group, l cgroups.Limits, leaderPgid int) (*CgroupReport, error) {
	rep := &CgroupReport{Group: g.Path(), Limits: l}
	kr, err := g.Kill()
	rep.Kill = kr
	self := os.Getpid()
	for _, p := range kr.Procs {
		st, serr := ReadStat(p.Pid)
		if serr != nil || st.Ppid != self || st.Pgid == leaderPgid {
			continue
		}
		// Our child and SIGKILLed: its exit is due.
		var ws unix.WaitStatus
		for {
			_, werr := unix.Wait4(p.Pid, &ws, 0, nil)
			if !errors.Is(werr, unix.EINTR) {
				break
			}
		}
	}
	if err != nil {
		return rep, fmt.Errorf("procexec: cgroup %s: %w", g.Path(), err)
	}
	return rep, nil
}

// RemoveCgroup reads g's counters into rep and removes g when the kill confirmed it empty.
func RemoveCgroup(g *cgroups.Group, rep *CgroupReport) error {
	var errs []error
	stats, err := g.Stats()
	rep.Stats = stats
	if err != nil {
		errs = append(errs, err)
	}
	if rep.Kill.Empty {
		if err := g.Delete(); err != nil {
			errs = append(errs, err)
		} else {
			rep.Removed = true
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("procexec: cgroup %s: %w", g.Path(), err)
	}
	return nil
}

// TeardownCgroup is KillCgroup then RemoveCgroup, for callers whose leader is reaped.
func TeardownCgroup(g *cgroups.Group, l cgroups.Limits, leaderPgid int) (*CgroupReport, error) {
	rep, err := KillCgroup(g, l, leaderPgid)
	return rep, errors.Join(err, RemoveCgroup(g, rep))
}

// CgroupID turns a caller's id into a cgroup id (a UID already is one).
func CgroupID(id string) string {
	if id == "" {
		return ""
	}
	var b strings.Builder
	for _, r := range id {
		if r < 128 && (r == '-' || r == '.' || r == '_' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')) {
			b.WriteRune(r)
		} else {
			b.WriteString("_" + strconv.Itoa(int(r)))
		}
	}
	s := b.String()
	if c := s[0]; c == '-' || c == '.' || c == '_' {
		s = "x" + s
	}
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}
