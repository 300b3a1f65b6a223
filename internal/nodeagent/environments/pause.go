package environments

import (
	"context"
	"fmt"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
)

// reasonPauseUnsupported is the Degraded reason of an environment asked to pause on a
// backend that cannot (it keeps running).
const reasonPauseUnsupported = "PauseUnsupported"

// runState is what the node reports of an allocated environment after applying its
// spec.desiredState (docs/vm-pause-snapshot.md).
type runState struct {
	ready       bool
	reason, msg string
	// unsupported: Paused was asked of a backend that cannot pause (Degraded, running).
	unsupported bool
}

// applyDesiredState pauses or resumes an allocated, ready environment as its
// spec.desiredState says: Paused stops the guest in place (Ready=False, reason Paused);
// Running (the default) resumes a paused guest and waits for its agent's handshake. A
// backend without backends.Pauser refuses a pause with pause-unsupported and keeps running.
func (a *Room) applyDesiredState(ctx context.Context, env *wbv1.Environment, b backends.Backend, spec backends.Spec, readyMsg string) runState {
	p, canPause := b.(backends.Pauser)
	if env.Spec.DesiredState == wbv1.EnvironmentDesiredPaused {
		if !canPause {
			return runState{ready: true, reason: "Ready", msg: readyMsg, unsupported: true}
		}
		st, err := p.Pause(ctx, spec)
		if err != nil {
			return runState{reason: wbv1.ReasonFailed, msg: "pause: " + err.Error()}
		}
		return runState{reason: wbv1.ReasonPaused, msg: st.Message}
	}
	if canPause {
		st, err := p.Resume(ctx, spec)
		if err != nil {
			return runState{reason: wbv1.ReasonFailed, msg: "resume: " + err.Error()}
		}
		if st.Message != "running" {
			readyMsg += "; " + st.Message
		}
	}
	return runState{ready: true, reason: "Ready", msg: readyMsg}
}

// PausedRefusal is the refusal of new work (a command, a session) on an environment asked
// to pause: refused rather than held, because a hold would need a queue bounded by how
// long an owner keeps the environment paused, which nothing bounds; the proposer resumes
// the environment and submits again.
func PausedRefusal(env *wbv1.Environment) (string, string) {
	if env.Spec.DesiredState != wbv1.EnvironmentDesiredPaused {
		return "", ""
	}
	return string(actuation.CodeEnvironmentPaused), fmt.Sprintf("environment %s is paused (spec.desiredState Paused): set it to Running, then submit again", env.Name)
}
