package backends

// Env is one environment opened for work (Backend.Open): the executor that starts its
// commands and the access to its roots. Callers decide nothing from the backend's
// identity, nor from where its processes run (the node's sandbox or a VM guest): they use
// the Env the backend hands out, and what a backend cannot do is a refusal of Exec or
// Roots. How an implementation reaches a guest (its channel, its PTY relay) is its own
// (internal/backends/guestenv).
type Env struct {
	// ID is the environment's ID (Spec.ID).
	ID string
	// Exec starts the environment's commands: the node's sandbox (hostexec) or the guest
	// (guestenv). Never nil in an Env a backend opened.
	Exec Executor
	// Roots opens the environment's roots for file access (files.go): the node's pinned
	// host directories (hostexec) or the guest's directories (guestenv). Never nil in an
	// Env a backend opened.
	Roots RootOpener
}
