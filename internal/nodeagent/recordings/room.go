// Package recordings is the node agent's room for Recordings (seed 004): it starts, reports
// and stops the recordings bound to this node, and turns the admitted work of an
// environment with an active recording into trace edges through its hooks (Before,
// AfterCommand, AfterPatch, Observation), which the command, patch, wait and probe rooms
// call where their work happens.
package recordings

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/nodeagent/artifacts"
	"sensorium.dev/workbench/internal/nodeagent/dataplane"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// Deps is what the room needs.
type Deps struct {
	// Ctx is the agent's run context: edges finished from a command's goroutine use it.
	Ctx      context.Context
	NodeName string
	// StateDir holds the traces of active recordings (<StateDir>/recordings).
	StateDir string
	Client   client.Client
	Reader   client.Reader
	// Blobs is the node's content-addressed store; a stopped trace is stored there.
	Blobs *artifacts.Store
	// MountedRoots returns the roots of an environment ready in this process.
	MountedRoots func(envUID string) ([]backends.MountedRoot, bool)
	// OpenRoot opens a mounted root: its host directory (then host is set and the state is
	// hashed incrementally), or the files of a root inside a VM guest.
	OpenRoot func(env *wbv1.Environment, mr backends.MountedRoot) (host *fsaccess.Root, files dataplane.Files, err error)
}

// Room records admitted work; it is safe for concurrent use.
type Room struct {
	d   Deps
	rec *recorder
}

// New returns the room over d.
func New(d Deps) *Room { return &Room{d: d, rec: newRecorder(d.StateDir)} }

// CommandOutcome is what the recorder keeps of a command's outcome.
type CommandOutcome struct {
	Phase        wbv1.CommandPhase
	ExitCode     *int32
	Bytes        int64
	Truncated    bool
	OutputDigest string
	RefusalCode  string
}

// Discard drops the state kept by Before for objUID (nothing was applied: no edge).
func (a *Room) Discard(objUID string) { a.takePending(objUID) }

// Setup registers the Recording reconciler with mgr.
func (a *Room) Setup(mgr ctrl.Manager) error {
	if err := ctrl.NewControllerManagedBy(mgr).For(&wbv1.Recording{}).Named("node-recording").
		WatchesRawSource(source.Channel(a.rec.wake, &handler.EnqueueRequestForObject{})).
		Complete(&recordingReconciler{a: a}); err != nil {
		return fmt.Errorf("recording controller: %w", err)
	}
	return nil
}
