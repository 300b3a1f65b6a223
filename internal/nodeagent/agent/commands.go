package agent

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/commands"
)

// setupCommands builds the TerminalCommand room over what it needs of the agent; setup.go
// registers it as the command controller's reconciler.
func (a *Agent) setupCommands() *commands.Room {
	a.cmds = commands.New(commands.Deps{Ctx: a.runCtx, NodeName: a.cfg.NodeName, ConcurrentCommands: a.cfg.Caps.ConcurrentCommands,
		Client: a.client, Reader: a.reader, Store: a.store, Runner: a.runner, Table: a.commands, Cgroups: a.cgroups,
		Event: a.recordEvent, Wake: func(obj client.Object) { a.wake(a.wakeCommands, obj) },
		KickCapacity: a.kickCapacity, Finished: a.commandFinished, Stopping: a.stopping.Load,
		Roots: a.mountedRoots, VerifyRoots: a.verifyRoots, SessionRing: a.sessionRing, SessionEmitter: a.sessionEmitter,
		Executor: a.executorOf, Limits: environmentLimits, FileSizeLimit: a.fileSizeLimit,
		AcquireShare: func(ctx context.Context, ns, creator string) (func(), string, string) {
			return a.acquireShare(ctx, a.shares.commands, commandCapName, actuation.CodeCommandCapReached, ns, creator)
		},
		RecordBefore: a.recordBefore, RecordAfter: a.recordAfterCommand})
	return a.cmds
}

// CommandStatusOwned is the exact part of a command's status the node agent applies (a
// test playing a stale node writer uses it).
func CommandStatusOwned(s *wbv1.TerminalCommandStatus) wbv1.TerminalCommandStatus {
	return commands.StatusOwned(s)
}

// stopCommands stops every running command match selects (deletion, drain) and marks it
// stopping, so its end is recorded Cancelled.
func (a *Agent) stopCommands(match func(*liveCommand) bool) []*liveCommand {
	return a.commands.Stop(match)
}

// wake re-queues obj. Senders are bounded (one goroutine per running command or session,
// both capped), and the controller drains the channel continuously.
func (a *Agent) wake(ch chan event.GenericEvent, obj client.Object) {
	done := context.Background().Done() // nil: never (an agent under construction)
	if a.runCtx != nil {
		done = a.runCtx.Done()
	}
	select {
	case ch <- event.GenericEvent{Object: obj}:
	case <-done:
	}
}
