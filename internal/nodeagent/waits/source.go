package waits

import "sensorium.dev/workbench/internal/nodeagent/nodekit"

// Source observes one scoped resource for the engine. The engine depends on
// nothing else of whoever provides it.
type Source interface {
	// Changed returns a channel that becomes ready at the next change of
	// the observed thing (new output, phase change, file event, command
	// completion...): either closed, or (for a coalescing stream such as a
	// FileWatcher subscription) sent one value. nil means it never changes
	// again. The engine calls Changed before each Observe, so a change
	// between the two is never lost.
	Changed() <-chan struct{}
	// Observe evaluates req's condition now and returns whether it holds,
	// what was observed (seq range, digest) and diagnostics. It must be
	// bounded in time and memory. An error ends a wait Failed (a probe
	// Error).
	Observe(req *Request) (Observation, error)
}

// KindSupporter is implemented by sources that evaluate only some kinds;
// Register and Probe refuse other kinds with wait-scope-invalid.
type KindSupporter interface {
	Supports(kind string) bool
}

// Releaser is implemented by per-wait sources holding resources (a watch
// subscription). Register and Probe take ownership: Release is called exactly
// once when the wait ends, after the probe's evaluation, or at once when the
// request is refused (or answered by an already pending wait).
type Releaser interface {
	Release()
}

func release(s Source) {
	if r, ok := s.(Releaser); ok {
		r.Release()
	}
}

type funcSource struct {
	changed func() <-chan struct{}
	observe func(*Request) (Observation, error)
}

func (f *funcSource) Changed() <-chan struct{} {
	if f.changed == nil {
		return nil
	}
	return f.changed()
}

func (f *funcSource) Observe(req *Request) (Observation, error) { return f.observe(req) }

// FuncSource adapts two functions into a Source, for the conditions the node
// agent feeds from its reconcilers: terminal.command.done,
// environment.ready, artifact.present, operation.done. changed may be nil
// (the observation never changes: the wait ends at its deadline unless the
// first observation holds); a Broadcaster's Changed fits it. observe must
// be non-nil and, for command.done, must also check that the command belongs
// to the scoped session (resolved decision 28) before reporting Satisfied.
func FuncSource(changed func() <-chan struct{}, observe func(*Request) (Observation, error)) Source {
	if observe == nil {
		return nil // Register refuses a nil source with wait-scope-invalid
	}
	return &funcSource{changed: changed, observe: observe}
}

// Broadcaster is the change signal a reconciler fires when its resource moves
// (nodekit.Broadcaster).
type Broadcaster = nodekit.Broadcaster
