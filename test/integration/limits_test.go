package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	sessionrt "sensorium.dev/workbench/internal/nodeagent/session"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// TestLimitsAgreeEndToEnd: for every node ceiling (actuation.Limits), the API server admits
// exactly the maximum and refuses one above it with the ceiling's code — and the node's
// runtime (procexec for commands, the session manager for sessions) refuses the same value
// with the same code, so nothing admission accepts is refused by the node for its size.
func TestLimitsAgreeEndToEnd(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	placedSetup(t, ns, "node-a", func(s *wbv1.CommandProfileSpec) {
		s.MaxTimeoutSeconds, s.MaxOutputBytes = actuation.MaxCommandTimeoutSeconds, actuation.MaxCommandOutputBytes
	})
	n := 0
	name := func() string { n++; return fmt.Sprintf("l%d", n) }
	// objects holds, per limit, the object whose field the limit bounds, with that field v.
	cmd := func() *wbv1.TerminalCommand {
		c := command(ns, name(), "/usr/bin/git", "--no-pager", "status")
		c.Spec.TimeoutSeconds, c.Spec.OutputBytes = 60, 1024
		return c
	}
	objects := map[string]func(v int64) client.Object{
		"command-timeout":  func(v int64) client.Object { c := cmd(); c.Spec.TimeoutSeconds = v; return c },
		"command-output":   func(v int64) client.Object { c := cmd(); c.Spec.OutputBytes = v; return c },
		"profile-timeout":  func(v int64) client.Object { p := profile(ns, name()); p.Spec.MaxTimeoutSeconds = v; return p },
		"profile-output":   func(v int64) client.Object { p := profile(ns, name()); p.Spec.MaxOutputBytes = v; return p },
		"session-duration": func(v int64) client.Object { s := session(ns, name(), "e"); s.Spec.MaxDurationSeconds = v; return s },
		"session-idle":     func(v int64) client.Object { s := session(ns, name(), "e"); s.Spec.IdleTimeoutSeconds = v; return s },
	}
	create := func(l actuation.Limit, v int64) error {
		obj, ok := objects[l.Name]
		if !ok {
			return fmt.Errorf("no object for limit %s", l.Name)
		}
		return env.Client.Create(ctx, obj(v))
	}
	// nodeSide holds, per node-side limit, the node runtime's start of a spec with that
	// value v. Only values above the ceiling are tried: the runtime refuses them before
	// spawning anything.
	mgr := sessionrt.NewManager(sessionrt.Caps{})
	sec := func(v int64) time.Duration { return time.Duration(v) * time.Second }
	run := func(spec procexec.Spec) error {
		spec.Argv = []string{"/bin/true"}
		_, err := procexec.Start(ctx, spec)
		return err
	}
	open := func(spec sessionrt.Spec) error {
		spec.ID, spec.EnvironmentID, spec.Argv = name(), "e", []string{"/bin/true"}
		_, err := mgr.Open(ctx, spec)
		return err
	}
	nodeSide := map[string]func(v int64) error{
		"command-timeout":  func(v int64) error { return run(procexec.Spec{Timeout: sec(v), OutputBytes: 1024}) },
		"command-output":   func(v int64) error { return run(procexec.Spec{Timeout: time.Second, OutputBytes: v}) },
		"session-duration": func(v int64) error { return open(sessionrt.Spec{MaxDuration: sec(v)}) },
		"session-idle":     func(v int64) error { return open(sessionrt.Spec{IdleTimeout: sec(v)}) },
	}
	// node is the refusal code the node's runtime gives v (false: not a node-side limit).
	node := func(l actuation.Limit, v int64) (string, bool) {
		start, ok := nodeSide[l.Name]
		if !ok {
			return "", false
		}
		return string(actuation.CodeOf(start(v))), true
	}
	for _, l := range actuation.Limits() {
		t.Run(l.Name, func(t *testing.T) {
			must(t, create(l, l.Max))
			mustRefuse(t, create(l, l.Max+1), string(l.Code)+": ")
			mustRefuse(t, create(l, l.Max*100), string(l.Code)+": ")
			if code, ok := node(l, l.Max+1); ok && code != string(l.Code) {
				t.Fatalf("the node refuses %d with %q, admission with %q", l.Max+1, code, l.Code)
			}
		})
	}
	// The node agent advertises the same ceilings (field names match the limits).
	caps := wbv1.NodeCaps{MaxCommandTimeoutSeconds: int64(procexec.MaxTimeout / time.Second), MaxCommandOutputBytes: procexec.MaxOutputBytes,
		MaxSessionDurationSeconds: int64(sessionrt.DefaultMaxDurationCeiling / time.Second)}
	if caps.MaxCommandTimeoutSeconds != actuation.MaxCommandTimeoutSeconds || caps.MaxCommandOutputBytes != actuation.MaxCommandOutputBytes ||
		caps.MaxSessionDurationSeconds != actuation.MaxSessionDurationSeconds {
		t.Fatalf("node ceilings %+v differ from admission's", caps)
	}
}
