// Package cgroups confines every process tree the node agent starts on the host (a
// structured command, a PTY session, a VMM) in a control group of its own, with pids,
// memory and CPU limits, and tears it down as a whole: whatever a program forked,
// setsid'd or double-forked is still in its cgroup and dies with it.
//
// Groups live under one parent path (Config.Parent, "workbench" by default) as
// <parent>/<kind>-<id>, e.g. workbench/cmd-<uid>, workbench/sess-<uid>, workbench/vm-<id>,
// so a crash-recovery sweep can find and remove every group a previous agent left behind.
//
// Both cgroup layouts are supported through github.com/containerd/cgroups/v3:
//   - v2 (unified; production nodes): one directory per group, the parent's
//     cgroup.subtree_control enables cpu, memory and pids, teardown writes cgroup.kill
//     and waits on cgroup.events for "populated 0";
//   - v1 (legacy and hybrid, where the unified mount carries no controllers): one
//     directory per group in each of the pids, memory, cpu and freezer hierarchies;
//     teardown freezes the group, SIGKILLs every member, thaws it and waits on a pidfd of
//     each member, in bounded rounds until cgroup.procs is empty.
//
// A required controller that the kernel does not offer makes Create fail with an error
// matching ErrUnavailable; callers refuse with the stable code cgroup-unavailable and the
// node's BackendCapability stops claiming the enforcement (Manager.Enforced).
//
// No Kubernetes types are used here.
package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Mode is the cgroup layout the manager drives.
type Mode string

// Modes.
const (
	ModeV1          Mode = "v1" // legacy or hybrid: controllers on v1 hierarchies
	ModeV2          Mode = "v2" // unified
	ModeUnavailable Mode = "unavailable"
)

// Controller names a resource controller.
type Controller string

// Controllers the manager uses. Freezer is needed on v1 only (to stop forks while the
// members are killed); v2 has cgroup.kill and cgroup.freeze built in.
const (
	Pids    Controller = "pids"
	Memory  Controller = "memory"
	CPU     Controller = "cpu"
	Freezer Controller = "freezer"
)

// Kind is the class of a group; it prefixes the group's name.
type Kind string

// Group kinds.
const (
	KindCommand Kind = "cmd"
	KindSession Kind = "sess"
	KindVM      Kind = "vm"
)

// Defaults and bounds.
const (
	// DefaultParent is the parent path under every hierarchy's root.
	DefaultParent = "workbench"
	// DefaultCommandPids and DefaultCommandMemoryBytes apply to a structured command or a
	// session when neither its profile nor its environment sets a limit: enough for a
	// build (make -j, go test) and far from what would hurt the node.
	DefaultCommandPids        = 1024
	DefaultCommandMemoryBytes = 2 << 30
	// CPUPeriod is the CFS period used to express CPU quotas.
	CPUPeriod = 100 * time.Millisecond
	// KillTimeout bounds one Kill: freezing, signalling and waiting for the members to
	// exit, over all rounds.
	KillTimeout = 10 * time.Second
	// MaxKillRounds bounds the freeze/kill/thaw rounds of one Kill.
	MaxKillRounds = 8
	// MaxSweep bounds how many leftover groups one Sweep removes.
	MaxSweep = 4096
	// MaxReportedProcs bounds the processes a KillReport lists.
	MaxReportedProcs = 32
)

// ErrUnavailable is matched (errors.Is) by every error caused by a controller or a
// cgroup layout the kernel does not offer.
var ErrUnavailable = errors.New("cgroup controller unavailable")

// ErrInvalid is matched by errors caused by an invalid group name or limit.
var ErrInvalid = errors.New("invalid cgroup request")

// Limits bound one group. Zero fields select no limit for that resource; callers pick
// defaults (see DefaultCommandPids) so that every class has a documented bound.
type Limits struct {
	// Pids is pids.max: forks beyond it fail with EAGAIN inside the group.
	Pids int64
	// MemoryBytes is the hard memory limit (v1 memory.limit_in_bytes and, where swap
	// accounting exists, memory.memsw.limit_in_bytes at the same value; v2 memory.max
	// and memory.swap.max 0): above it the kernel's OOM killer acts inside the group.
	MemoryBytes int64
	// CPUMillis is a CFS quota in thousandths of a CPU (1000 = one CPU).
	CPUMillis int64
}

// Config configures a Manager.
type Config struct {
	// Parent is the path (relative, clean, no "..") under each hierarchy's root where
	// every group lives. Default DefaultParent.
	Parent string
	// Root is the cgroup mount root (default /sys/fs/cgroup). Only for tests of the
	// detection logic; the layout is detected from it.
	Root string
}

// Manager creates, finds and removes groups under its parent.
type Manager struct {
	mode    Mode
	root    string
	parent  string
	have    map[Controller]bool
	swap    bool // v1: memory.memsw.* exists (swap accounting)
	mu      sync.Mutex
	v2ready bool // v2: the parent exists with controllers enabled
}

// NewManager detects the cgroup layout and the available controllers. It does not fail
// when controllers are missing: Create does, per group, and Enforced/Missing say so.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Parent == "" {
		cfg.Parent = DefaultParent
	}
	p := filepath.Clean(cfg.Parent)
	if filepath.IsAbs(p) || p == "." || strings.HasPrefix(p, "..") || p != strings.Trim(cfg.Parent, "/") {
		return nil, fmt.Errorf("cgroups: parent %q must be a clean relative path: %w", cfg.Parent, ErrInvalid)
	}
	m := &Manager{root: cfg.Root, parent: p, have: map[Controller]bool{}}
	if m.root == "" {
		m.root = "/sys/fs/cgroup"
	}
	m.mode = detectMode(m.root)
	switch m.mode {
	case ModeV2:
		b, err := os.ReadFile(filepath.Join(m.root, "cgroup.controllers"))
		if err != nil {
			return nil, fmt.Errorf("cgroups: read %s/cgroup.controllers: %w", m.root, err)
		}
		for _, c := range strings.Fields(string(b)) {
			m.have[Controller(c)] = true
		}
		m.have[Freezer] = true // cgroup.freeze and cgroup.kill are part of every v2 group
	case ModeV1:
		for _, c := range []Controller{Pids, Memory, CPU, Freezer} {
			m.have[c] = fileExists(filepath.Join(m.root, string(c), "cgroup.procs"))
		}
		m.swap = fileExists(filepath.Join(m.root, "memory", "memory.memsw.limit_in_bytes"))
	}
	return m, nil
}

func detectMode(root string) Mode {
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return ModeUnavailable
	}
	if st.Type == cgroup2Magic {
		return ModeV2
	}
	if root == "/sys/fs/cgroup" {
		return hostLayout()
	}
	// A non-default root (tests): v1 when it holds v1 hierarchies.
	if fileExists(filepath.Join(root, "pids", "cgroup.procs")) || fileExists(filepath.Join(root, "memory", "cgroup.procs")) {
		return ModeV1
	}
	return ModeUnavailable
}

// Mode returns the detected layout.
func (m *Manager) Mode() Mode { return m.mode }

// Parent returns the parent path.
func (m *Manager) Parent() string { return m.parent }

// Required lists the controllers a group needs in this layout.
func (m *Manager) Required() []Controller {
	if m.mode == ModeV1 {
		return []Controller{Pids, Memory, CPU, Freezer}
	}
	return []Controller{Pids, Memory, CPU}
}

// Missing lists the required controllers the kernel does not offer (all of them when
// no cgroup layout was found).
func (m *Manager) Missing() []Controller {
	var out []Controller
	for _, c := range m.Required() {
		if !m.have[c] {
			out = append(out, c)
		}
	}
	return out
}

// Available reports whether groups can be created with every limit enforced.
func (m *Manager) Available() bool { return m.mode != ModeUnavailable && len(m.Missing()) == 0 }

// Enforced returns the host resource classes this manager enforces, in the vocabulary
// of BackendCapability.resourceEnforcement: host-process (a group per process tree,
// killed as a whole), host-memory, host-cpu. Empty when no group can be created.
func (m *Manager) Enforced() []string {
	if !m.Available() {
		return nil
	}
	return []string{"host-cpu", "host-memory", "host-process"}
}

// Describe is a one-line summary for logs and capability messages.
func (m *Manager) Describe() string {
	if m.Available() {
		return fmt.Sprintf("cgroup %s under %q (pids, memory, cpu)", m.mode, m.parent)
	}
	return fmt.Sprintf("cgroup %s: missing controllers %v", m.mode, m.Missing())
}

// idPattern is the shape of a group id, checked by validID (not compiled as a regexp: this
// package is linked into the sandbox helper, whose every start would pay a package-level
// compile of the counted repetition, ~2-4 ms of CPU per command on the bench machine).
const idPattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`

// validID reports whether id matches idPattern.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// GroupName returns the name of the group of kind and id ("cmd-<id>").
func GroupName(kind Kind, id string) (string, error) {
	switch kind {
	case KindCommand, KindSession, KindVM:
	default:
		return "", fmt.Errorf("cgroups: unknown kind %q: %w", kind, ErrInvalid)
	}
	if !validID(id) {
		return "", fmt.Errorf("cgroups: id %q must match %s: %w", id, idPattern, ErrInvalid)
	}
	return string(kind) + "-" + id, nil
}

// ParseName splits a group name into its kind and id.
func ParseName(name string) (Kind, string, bool) {
	k, id, ok := strings.Cut(name, "-")
	if !ok {
		return "", "", false
	}
	if _, err := GroupName(Kind(k), id); err != nil {
		return "", "", false
	}
	return Kind(k), id, true
}

func (l Limits) validate() error {
	if l.Pids < 0 || l.MemoryBytes < 0 || l.CPUMillis < 0 {
		return fmt.Errorf("cgroups: negative limit %+v: %w", l, ErrInvalid)
	}
	if l.MemoryBytes > 0 && l.MemoryBytes < 4<<20 {
		return fmt.Errorf("cgroups: memory limit %d below 4 MiB: %w", l.MemoryBytes, ErrInvalid)
	}
	return nil
}

func (l Limits) cpuQuota() (quota int64, period uint64) {
	period = uint64(CPUPeriod / time.Microsecond)
	return l.CPUMillis * int64(period) / 1000, period
}

// Create creates the group of kind and id with limits l. A group of that name left over
// from an earlier run is killed and removed first, so a new group never inherits
// processes. The caller adds processes (Group.Add) and eventually Kill and Delete.
func (m *Manager) Create(kind Kind, id string, l Limits) (*Group, error) {
	name, err := GroupName(kind, id)
	if err != nil {
		return nil, err
	}
	if err := l.validate(); err != nil {
		return nil, err
	}
	if m.mode == ModeUnavailable {
		return nil, fmt.Errorf("cgroups: create %s: no cgroup hierarchy at %s: %w", name, m.root, ErrUnavailable)
	}
	if miss := m.Missing(); len(miss) > 0 {
		return nil, fmt.Errorf("cgroups: create %s: the kernel offers no %v controller: %w", name, miss, ErrUnavailable)
	}
	if old, err := m.Load(name); err == nil {
		if _, err := old.Kill(); err != nil {
			return nil, fmt.Errorf("cgroups: create %s: kill leftover group: %w", name, err)
		}
		if err := old.Delete(); err != nil {
			return nil, fmt.Errorf("cgroups: create %s: remove leftover group: %w", name, err)
		}
	}
	g := &Group{m: m, name: name, limits: l}
	switch m.mode {
	case ModeV2:
		err = g.createV2()
	default:
		err = g.createV1()
	}
	if err != nil {
		return nil, fmt.Errorf("cgroups: create %s/%s (%s): %w", m.parent, name, m.mode, err)
	}
	return g, nil
}

// Load returns the existing group name (as GroupName builds it). It fails with
// os.ErrNotExist when no hierarchy holds it.
func (m *Manager) Load(name string) (*Group, error) {
	if _, _, ok := ParseName(name); !ok {
		return nil, fmt.Errorf("cgroups: group name %q: %w", name, ErrInvalid)
	}
	g := &Group{m: m, name: name}
	if !slices.ContainsFunc(g.dirs(), fileExists) {
		return nil, fmt.Errorf("cgroups: group %s/%s: %w", m.parent, name, os.ErrNotExist)
	}
	if m.mode == ModeV1 {
		g.ctrls = []Controller{}
		for _, c := range v1Controllers {
			if fileExists(g.dir(c)) {
				g.ctrls = append(g.ctrls, c)
			}
		}
	}
	return g, nil
}

// List returns the names of the groups under the parent (union over hierarchies).
func (m *Manager) List() ([]string, error) {
	seen := map[string]bool{}
	var errs []error
	for _, dir := range m.parentDirs() {
		ents, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range ents {
			if e.IsDir() {
				if _, _, ok := ParseName(e.Name()); ok {
					seen[e.Name()] = true
				}
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, errors.Join(errs...)
}

// SweepReport says what a Sweep removed.
type SweepReport struct {
	Removed []string // groups removed
	Killed  int      // processes found alive in them and killed
	Failed  []string // groups that could not be emptied or removed
}

// Sweep removes every group under the parent for which keep returns false: its
// processes are killed and its directories removed. It is the crash-recovery sweep of
// groups a previous agent left behind.
func (m *Manager) Sweep(keep func(name string) bool) (SweepReport, error) {
	var rep SweepReport
	if m.mode == ModeUnavailable {
		return rep, nil
	}
	names, err := m.List()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for i, n := range names {
		if i >= MaxSweep {
			errs = append(errs, fmt.Errorf("cgroups: sweep: %d groups exceed the cap %d", len(names), MaxSweep))
			break
		}
		if keep != nil && keep(n) {
			continue
		}
		g, err := m.Load(n)
		if err != nil {
			continue // gone meanwhile
		}
		kr, kerr := g.Kill()
		rep.Killed += kr.Found
		derr := g.Delete()
		if err := errors.Join(kerr, derr); err != nil {
			if _, lerr := m.Load(n); lerr != nil {
				continue // removed by its owner while this sweep ran (a runner discarding it)
			}
			rep.Failed = append(rep.Failed, n)
			errs = append(errs, err)
			continue
		}
		rep.Removed = append(rep.Removed, n)
	}
	return rep, errors.Join(errs...)
}

// RemoveParent removes the parent's directories if no group is left under them (an
// agent that stops with nothing running leaves nothing behind). It reports whether the
// parent is gone.
func (m *Manager) RemoveParent() bool {
	gone := true
	for _, d := range m.parentDirs() {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			gone = false
		}
	}
	return gone
}

// v1 hierarchies that hold a directory per group.
var v1Controllers = []Controller{Pids, Memory, CPU, Freezer}

func (m *Manager) parentDirs() []string {
	if m.mode == ModeV2 {
		return []string{filepath.Join(m.root, m.parent)}
	}
	var out []string
	for _, c := range v1Controllers {
		out = append(out, filepath.Join(m.root, string(c), m.parent))
	}
	return out
}

// Proc is a process found in a group.
type Proc struct {
	Pid  int
	Ppid int
	Comm string
}

func (p Proc) String() string { return fmt.Sprintf("%d(%s)", p.Pid, p.Comm) }

// KillReport says what a Kill found and whether the group is empty.
type KillReport struct {
	// Found counts the distinct processes found alive in the group and killed.
	Found int
	// Procs lists them (Summary shows the first MaxReportedProcs).
	Procs []Proc
	// Rounds is the number of kill rounds it took.
	Rounds int
	// Empty is true when cgroup.procs was confirmed empty.
	Empty bool
}

// Summary renders the report for an outcome message.
func (r KillReport) Summary() string {
	if r.Found == 0 {
		return "cgroup empty"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "killed %d process(es) left in the cgroup", r.Found)
	if len(r.Procs) > 0 {
		b.WriteString(": ")
		for i, p := range r.Procs[:min(len(r.Procs), MaxReportedProcs)] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(p.String())
		}
		if r.Found > MaxReportedProcs {
			b.WriteString(", ...")
		}
	}
	if !r.Empty {
		b.WriteString("; NOT confirmed empty")
	}
	return b.String()
}

// Stats are the group's counters that explain an outcome.
type Stats struct {
	MemoryLimitBytes uint64
	MemoryPeakBytes  uint64
	// MemoryMaxHits counts allocations that hit the limit (v1 memory.failcnt, v2
	// memory.events "max").
	MemoryMaxHits uint64
	// OOMKills counts processes the OOM killer killed inside the group.
	OOMKills  uint64
	PidsLimit uint64
	PidsPeak  uint64
	// PidsMaxHits counts forks refused at pids.max (pids.events "max").
	PidsMaxHits uint64
}

// Summary renders the counters that matter for an outcome ("" when nothing hit a limit).
func (s Stats) Summary() string {
	var parts []string
	if s.OOMKills > 0 {
		parts = append(parts, fmt.Sprintf("%d process(es) OOM-killed at the cgroup memory limit of %d bytes", s.OOMKills, s.MemoryLimitBytes))
	}
	if s.PidsMaxHits > 0 {
		parts = append(parts, fmt.Sprintf("%d fork(s) refused at the cgroup pids limit of %d", s.PidsMaxHits, s.PidsLimit))
	}
	return strings.Join(parts, "; ")
}

// Group is one cgroup.
type Group struct {
	m      *Manager
	name   string
	limits Limits
	// v1: the hierarchies the group lives in (cpu only with a CPU quota: every
	// hierarchy costs a migration when a process is added); nil means all of them.
	ctrls []Controller
}

// hierarchies returns the v1 hierarchies the group's members are added to.
func (g *Group) hierarchies() []Controller {
	if g.ctrls == nil {
		return v1Controllers
	}
	return g.ctrls
}

// Name returns the group's name ("cmd-<id>").
func (g *Group) Name() string { return g.name }

// Path returns the group's path relative to the hierarchy roots ("workbench/cmd-<id>").
func (g *Group) Path() string { return filepath.Join(g.m.parent, g.name) }

func (g *Group) dirs() []string {
	var out []string
	for _, d := range g.m.parentDirs() {
		out = append(out, filepath.Join(d, g.name))
	}
	return out
}

// dir returns the group's directory for controller c (v2: the one directory).
func (g *Group) dir(c Controller) string {
	if g.m.mode == ModeV2 {
		return filepath.Join(g.m.root, g.m.parent, g.name)
	}
	return filepath.Join(g.m.root, string(c), g.m.parent, g.name)
}

// Limits returns the limits the group enforces.
func (g *Group) Limits() Limits { return g.limits }

// Update sets new limits on an existing group: a group created ahead of its process tree
// (a pre-started sandbox) takes the limits of the command it ends up running before that
// command is configured. On v1 a CPU quota needs the cpu hierarchy, which a group created
// without one does not have (its members were never added there): that is ErrInvalid, and
// the caller creates a group of its own instead.
func (g *Group) Update(l Limits) error {
	if err := l.validate(); err != nil {
		return err
	}
	if g.m.mode == ModeV1 && l.CPUMillis > 0 && !slices.Contains(g.hierarchies(), CPU) {
		return fmt.Errorf("cgroups: update %s: a CPU quota needs the cpu hierarchy the group was created without: %w", g.Path(), ErrInvalid)
	}
	var err error
	switch g.m.mode {
	case ModeV2:
		err = g.updateV2(l)
	case ModeV1:
		err = g.updateV1(l)
	default:
		err = ErrUnavailable
	}
	if err != nil {
		return fmt.Errorf("cgroups: update %s (%s): %w", g.Path(), g.m.mode, err)
	}
	g.limits = l
	return nil
}

// Add moves process pid (all its threads) into the group, in every hierarchy.
func (g *Group) Add(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("cgroups: add pid %d to %s: %w", pid, g.name, ErrInvalid)
	}
	v := []byte(strconv.Itoa(pid))
	if g.m.mode == ModeV2 {
		if err := os.WriteFile(filepath.Join(g.dir(""), "cgroup.procs"), v, 0); err != nil {
			return fmt.Errorf("cgroups: add pid %d to %s: %w", pid, g.Path(), err)
		}
		return nil
	}
	for _, c := range g.hierarchies() {
		if err := os.WriteFile(filepath.Join(g.dir(c), "cgroup.procs"), v, 0); err != nil {
			return fmt.Errorf("cgroups: add pid %d to %s in %s: %w", pid, g.Path(), c, err)
		}
	}
	return nil
}

// Contains reports whether pid is a member of the group (in the pids hierarchy on v1).
func (g *Group) Contains(pid int) bool {
	pids, err := g.Pids()
	return err == nil && slices.Contains(pids, pid)
}

// Pids lists the live processes of the group (zombies are not members). On v1 the pids
// hierarchy is the reference: every member is added to all hierarchies at once.
func (g *Group) Pids() ([]int, error) {
	return readProcs(filepath.Join(g.dir(Pids), "cgroup.procs"))
}

func readProcs(file string) ([]int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("cgroups: read %s: %w", file, err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out, nil
}

// Kill kills every process of the group and waits (bounded by KillTimeout) until the
// group is confirmed empty. Forks racing the kill are stopped by freezing (v1) or by
// cgroup.kill's atomicity (v2). A group that does not exist any more is empty.
func (g *Group) Kill() (KillReport, error) {
	var rep KillReport
	deadline := time.Now().Add(KillTimeout)
	seen := map[int]bool{}
	for rep.Rounds < MaxKillRounds {
		pids, err := g.Pids()
		if errors.Is(err, os.ErrNotExist) {
			rep.Empty = true
			return rep, nil
		}
		if err != nil {
			return rep, err
		}
		if len(pids) == 0 {
			rep.Empty = true
			return rep, nil
		}
		if time.Now().After(deadline) {
			break
		}
		rep.Rounds++
		var procs []Proc
		if g.m.mode == ModeV2 {
			procs, err = g.killV2(pids, deadline)
		} else {
			procs, err = g.killV1(deadline)
		}
		for _, p := range procs {
			if !seen[p.Pid] {
				seen[p.Pid] = true
				rep.Found++
				rep.Procs = append(rep.Procs, p)
			}
		}
		if err != nil {
			return rep, fmt.Errorf("cgroups: kill %s: %w", g.Path(), err)
		}
	}
	left, _ := g.Pids()
	return rep, fmt.Errorf("cgroups: kill %s: %d process(es) still present after %d rounds: %v", g.Path(), len(left), rep.Rounds, left)
}

// Stats reads the group's counters. Counters a kernel does not offer read as zero.
func (g *Group) Stats() (Stats, error) {
	var s Stats
	var errs []error
	read := func(c Controller, file string) uint64 {
		v, err := readUintFile(filepath.Join(g.dir(c), file))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		return v
	}
	s.PidsLimit = read(Pids, "pids.max")
	s.PidsPeak = read(Pids, "pids.peak")
	s.PidsMaxHits = readKV(filepath.Join(g.dir(Pids), "pids.events"), "max", &errs)
	if g.m.mode == ModeV2 {
		s.MemoryLimitBytes = read(Memory, "memory.max")
		s.MemoryPeakBytes = read(Memory, "memory.peak")
		ev := filepath.Join(g.dir(Memory), "memory.events")
		s.MemoryMaxHits = readKV(ev, "max", &errs)
		s.OOMKills = readKV(ev, "oom_kill", &errs)
	} else {
		s.MemoryLimitBytes = read(Memory, "memory.limit_in_bytes")
		if s.MemoryLimitBytes >= 1<<62 {
			s.MemoryLimitBytes = 0 // v1 reports "no limit" as a huge page-aligned number
		}
		s.MemoryPeakBytes = read(Memory, "memory.max_usage_in_bytes")
		s.MemoryMaxHits = read(Memory, "memory.failcnt")
		s.OOMKills = readKV(filepath.Join(g.dir(Memory), "memory.oom_control"), "oom_kill", &errs)
	}
	return s, errors.Join(errs...)
}

// Delete removes the (empty) group from every hierarchy. A group already gone is not an
// error.
func (g *Group) Delete() error {
	var errs []error
	for _, d := range g.dirs() {
		if err := rmdirBounded(d); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cgroups: delete %s: %w", g.Path(), err)
	}
	return nil
}

// rmdirBounded removes an empty cgroup directory. The kernel may report EBUSY for a
// moment after the last member exited (its exit is still being accounted); retry a few
// times with a short backoff.
func rmdirBounded(d string) error {
	delay := time.Millisecond
	for i := 0; ; i++ {
		err := unix.Rmdir(d)
		switch {
		case err == nil, errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.EBUSY) && i < 10:
			time.Sleep(delay)
			delay *= 2
		default:
			return fmt.Errorf("rmdir %s: %w", d, err)
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// readUintFile reads a one-number cgroup file; "max" reads as 0 (no limit).
func readUintFile(p string) (uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" || s == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", p, err)
	}
	return v, nil
}

// readKV reads key's value from a "key value" per line cgroup file.
func readKV(p, key string, errs *[]error) uint64 {
	b, err := os.ReadFile(p)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			*errs = append(*errs, err)
		}
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				*errs = append(*errs, fmt.Errorf("parse %s %s: %w", p, key, err))
			}
			return n
		}
	}
	return 0
}

// readProc reads a process's parent and command name from /proc (best effort).
func readProc(pid int) Proc {
	p := Proc{Pid: pid}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return p
	}
	i, j := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
	if i < 0 || j < i {
		return p
	}
	p.Comm = string(b[i+1 : j])
	if f := strings.Fields(string(b[j+1:])); len(f) > 1 {
		p.Ppid, _ = strconv.Atoi(f[1])
	}
	return p
}
