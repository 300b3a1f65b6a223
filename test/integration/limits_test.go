package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

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
	create := func(l actuation.Limit, v int64) error {
		switch l.Name {
		case "command-timeout", "command-output":
			c := command(ns, name(), "/usr/bin/git", "--no-pager", "status")
			c.Spec.TimeoutSeconds, c.Spec.OutputBytes = 60, 1024
			if l.Name == "command-timeout" {
				c.Spec.TimeoutSeconds = v
			} else {
				c.Spec.OutputBytes = v
			}
			return env.Client.Create(ctx, c)
		case "profile-timeout", "profile-output":
			p := profile(ns, name())
			if l.Name == "profile-timeout" {
				p.Spec.MaxTimeoutSeconds = v
			} else {
				p.Spec.MaxOutputBytes = v
			}
			return env.Client.Create(ctx, p)
		case "session-duration", "session-idle":
			s := session(ns, name(), "e")
			if l.Name == "session-duration" {
				s.Spec.MaxDurationSeconds = v
			} else {
				s.Spec.IdleTimeoutSeconds = v
			}
			return env.Client.Create(ctx, s)
		}
		return fmt.Errorf("no object for limit %s", l.Name)
	}
	// node is the refusal code the node's runtime gives v (false: not a node-side limit). Only
	// values above the ceiling are tried: the runtime refuses them before spawning anything.
	mgr := sessionrt.NewManager(sessionrt.Caps{})
	node := func(l actuation.Limit, v int64) (string, bool) {
		switch l.Name {
		case "command-timeout", "command-output":
			spec := procexec.Spec{Argv: []string{"/bin/true"}, Timeout: time.Second, OutputBytes: 1024}
			if l.Name == "command-timeout" {
				spec.Timeout = time.Duration(v) * time.Second
			} else {
				spec.OutputBytes = v
			}
			_, err := procexec.Start(ctx, spec) // refused before anything is spawned
			return string(actuation.CodeOf(err)), true
		case "session-duration", "session-idle":
			spec := sessionrt.Spec{ID: name(), EnvironmentID: "e", Argv: []string{"/bin/true"}}
			if l.Name == "session-duration" {
				spec.MaxDuration = time.Duration(v) * time.Second
			} else {
				spec.IdleTimeout = time.Duration(v) * time.Second
			}
			_, err := mgr.Open(ctx, spec) // refused before anything is spawned
			return string(actuation.CodeOf(err)), true
		}
		return "", false
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
