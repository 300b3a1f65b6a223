package agent

import (
	"context"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/nodeagent/sessions"
)

// The session room (internal/nodeagent/sessions) owns TerminalSessions; these are the
// agent's reads of the sessions it serves.

// sessionRing returns the event ring of an open session.
func (a *Agent) sessionRing(uid string) *ring.Ring {
	if s := a.sess.Open(uid); s != nil {
		return s.Ring
	}
	return nil
}

// closeSession closes a live session idempotently and returns its final phase.
func (a *Agent) closeSession(ctx context.Context, uid string, expired bool) wbv1.SessionPhase {
	return sessions.Close(ctx, a.sess, a.store, uid, expired)
}

// sessionEmitter re-checks, before a command starts, that its creator may write into its
// session (sessions.Emitter).
func (a *Agent) sessionEmitter(ctx context.Context, cmd *wbv1.TerminalCommand, sess *wbv1.TerminalSession) (*actuation.Refusal, error) {
	return sessions.Emitter(ctx, a.client, cmd, sess)
}

// sessionDeps is what the session room sees of the agent.
func (a *Agent) sessionDeps() sessions.Deps {
	return sessions.Deps{Ctx: a.runCtx, NodeName: a.cfg.NodeName, Client: a.client, Reader: a.reader, Store: a.store,
		Live: a.sess, PTYs: a.sessions,
		Caps:         sessions.Caps{Sessions: a.cfg.Caps.Sessions, SessionsPerEnvironment: a.cfg.Caps.SessionsPerEnvironment, EventBufferDepth: a.cfg.Caps.EventBufferDepth},
		Cordoned:     a.report.Cordoned,
		Paused:       pausedRefusal, // environments.go
		MountedRoots: a.mountedRoots, VerifyRoots: a.verifyRoots,
		AcquireShare: func(ctx context.Context, ns, creator string) (func(), string, string) { // shares.go
			return a.acquireShare(ctx, a.shares.sessions, sessionCapName, actuation.CodeSessionCapReached, ns, creator)
		},
		Executor: a.executorOf, Relay: a.helper, Limits: environmentLimits, FileSizeLimit: a.fileSizeLimit,
		Available: a.sessionAvailable, Changed: a.sessChanged.Broadcast, Kick: a.kickCapacity, Event: a.recordEvent, Wake: a.wakeSessions}
}
