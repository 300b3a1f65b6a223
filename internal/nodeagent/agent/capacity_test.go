package agent

import (
	"reflect"
	"testing"

	"sensorium.dev/workbench/internal/nodeagent/session"
)

func TestNodeSizedCaps(t *testing.T) {
	const gib = uint64(1) << 30
	for _, tc := range []struct {
		name     string
		cpus     int
		mem      uint64
		sessions int
		perEnv   int
		readers  int
		commands int
	}{
		{"this machine: 2 CPUs, 24 GiB", 2, 24 * gib, 16, 8, 32, 8},
		{"tiny node: floor of 16 sessions", 1, 1 * gib, 16, 8, 32, 8},
		{"unknown memory reads as 1 GiB", 4, 0, 16, 8, 32, 8},
		{"8 CPUs 32 GiB", 8, 32 * gib, 64, 16, 128, 16},
		{"memory-bound: 16 CPUs 4 GiB", 16, 4 * gib, 64, 16, 128, 32},
		{"big node: capped at 256 sessions and 64 commands", 96, 768 * gib, 256, 64, 512, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NodeSizedCaps(tc.cpus, tc.mem)
			if c.Sessions != tc.sessions || c.SessionsPerEnvironment != tc.perEnv || c.ReaderTasks != tc.readers || c.ConcurrentCommands != tc.commands {
				t.Fatalf("NodeSizedCaps(%d, %d GiB) = %+v; want sessions %d, per env %d, readers %d, commands %d",
					tc.cpus, tc.mem/gib, c, tc.sessions, tc.perEnv, tc.readers, tc.commands)
			}
		})
	}
}

func TestCapsDefaultsKeepConfiguredValues(t *testing.T) {
	node := NodeSizedCaps(2, 24<<30)
	got := Caps{Sessions: 3, ConcurrentCommands: 1}.withDefaultsFrom(node)
	if got.Sessions != 3 || got.ConcurrentCommands != 1 {
		t.Fatalf("configured caps overridden: %+v", got)
	}
	if got.ReaderTasks != node.ReaderTasks || got.SessionsPerEnvironment != node.SessionsPerEnvironment {
		t.Fatalf("unset caps not node-sized: %+v (node %+v)", got, node)
	}
	if got.EventBufferDepth != DefaultEventBufferDepth || got.InputQueueDepth != DefaultInputQueueDepth {
		t.Fatalf("fixed defaults not applied: %+v", got)
	}
}

// Every cap a configuration sets survives the defaulting: a field added to Caps but not to
// withDefaultsFrom was silently reset (prestartedSandboxes was, so the pre-started pool
// never ran in any configured agent).
func TestCapsDefaultsKeepEveryConfiguredField(t *testing.T) {
	var set Caps
	v := reflect.ValueOf(&set).Elem()
	for i := 0; i < v.NumField(); i++ {
		v.Field(i).SetInt(int64(100 + i))
	}
	got := set.withDefaultsFrom(NodeSizedCaps(2, 24<<30))
	if got != set {
		t.Fatalf("configured caps changed by the defaults:\n got %+v\nwant %+v", got, set)
	}
}

// TestCommandWorkersFollowTheCap: the node's command controller decides as many passes at
// once as the node runs commands, bounded; never one worker for the whole node.
func TestCommandWorkersFollowTheCap(t *testing.T) {
	for _, tc := range []struct{ cap, workers int }{{0, 1}, {1, 1}, {8, 8}, {16, 16}, {64, maxCommandWorkers}} {
		if got := commandOptions(Caps{ConcurrentCommands: tc.cap}).MaxConcurrentReconciles; got != tc.workers {
			t.Errorf("concurrentCommands %d: %d command workers, want %d", tc.cap, got, tc.workers)
		}
	}
	if commandOptions(Caps{ConcurrentCommands: 8}).RateLimiter == nil {
		t.Error("command workers lost the bounded retry backoff")
	}
}

// TestPrestartedSandboxesDefaultOnAndOff: unset turns the pool on at its default; a negative
// value turns it off and stays off however often defaults are applied.
func TestPrestartedSandboxesDefaultOnAndOff(t *testing.T) {
	for _, tc := range []struct{ set, caps, runner int }{
		{0, DefaultPrestartedSandboxes, DefaultPrestartedSandboxes},
		{-1, -1, 0},
		{5, 5, 5},
	} {
		c := Caps{PrestartedSandboxes: tc.set}.withDefaultsFrom(Caps{}).withDefaultsFrom(Caps{})
		if c.PrestartedSandboxes != tc.caps || c.prestartedSandboxes() != tc.runner {
			t.Errorf("prestartedSandboxes %d: caps %d runner %d, want %d and %d", tc.set, c.PrestartedSandboxes, c.prestartedSandboxes(), tc.caps, tc.runner)
		}
	}
}

// TestPrestartedSessionsDefaultOnAndOff: unset turns the session pool on at its default, a
// negative value keeps it off however often defaults are applied, and the session manager
// the agent builds gets that size (off: no pool).
func TestPrestartedSessionsDefaultOnAndOff(t *testing.T) {
	for _, tc := range []struct{ set, caps, manager int }{
		{0, DefaultPrestartedSessions, DefaultPrestartedSessions},
		{-1, -1, -1},
		{3, 3, 3},
	} {
		c := Caps{PrestartedSessions: tc.set}.withDefaultsFrom(Caps{}).withDefaultsFrom(Caps{})
		m := session.NewManager(session.Caps{PrestartedSessions: c.PrestartedSessions})
		if c.PrestartedSessions != tc.caps || m.Caps().PrestartedSessions != tc.manager {
			t.Errorf("prestartedSessions %d: caps %d manager %d, want %d and %d", tc.set, c.PrestartedSessions, m.Caps().PrestartedSessions, tc.caps, tc.manager)
		}
	}
}
