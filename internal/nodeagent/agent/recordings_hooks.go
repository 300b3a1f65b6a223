package agent

import (
	"context"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/nodeagent/dataplane"
	"sensorium.dev/workbench/internal/nodeagent/recordings"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/skills"
)

// The recordings room (internal/nodeagent/recordings) owns the recorder; the rooms still
// in this package reach its hooks through these few methods.

// newRecordings builds the recordings room over the agent's client, store and roots.
func (a *Agent) newRecordings() *recordings.Room {
	return recordings.New(recordings.Deps{Ctx: a.runCtx, NodeName: a.cfg.NodeName, StateDir: a.cfg.StateDir,
		Client: a.client, Reader: a.reader, Blobs: a.blobs, MountedRoots: a.mountedRoots,
		OpenRoot: func(env *wbv1.Environment, mr backends.MountedRoot) (*fsaccess.Root, dataplane.Files, error) {
			files, err := a.openRoot(env, mr)
			if err != nil {
				return nil, nil, err
			}
			host, werr := files.Watch() // a root with no host directory is read through its files
			if werr != nil {
				host = nil
			}
			return host, files, nil
		}})
}

func (a *Agent) recordBefore(ctx context.Context, env *wbv1.Environment, session, objUID string) {
	a.rec.Before(ctx, env, session, objUID)
}

func (a *Agent) recordAfterCommand(cmd *wbv1.TerminalCommand, envName string, o *commandOutcome, output []byte) {
	a.rec.AfterCommand(cmd, envName, recordings.CommandOutcome{Phase: o.Phase, ExitCode: o.ExitCode, Bytes: o.Bytes,
		Truncated: o.Truncated, OutputDigest: o.OutputDigest, RefusalCode: o.RefusalCode}, output)
}

func (a *Agent) recordObservation(ctx context.Context, ns, envName, session string, kind skills.EdgeKind, name, condition, result string) {
	a.rec.Observation(ctx, ns, envName, session, kind, name, condition, result)
}
