package environments

import (
	"fmt"
	"sync"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// A host root is opened once, when its environment first becomes ready: the directory the
// backend admitted (its resolved path) is pinned as an O_PATH descriptor, opened with no
// symlink followed on the way (fsaccess.PinRoot). File reads, patches, waits and the data
// plane work beneath that descriptor, never through the path again; its device and inode
// are recorded in the node's store. Every later pass, and every process start, checks that
// the path still names the pinned directory: if a symlink or directory was swapped in,
// the environment fails with root-changed (and stays failed across agent restarts, since
// the identity is in the store), so the swap is never followed by Landlock, a working
// directory or a file access.

// Registry holds the environments allocated in this process and their pinned roots. The
// room writes it; the agent's other parts (commands, sessions, files, the data plane) read
// it through its exported methods. It calls into nothing while holding its lock.
type Registry struct {
	mu   sync.Mutex
	envs map[string]*liveEnv               // environment UID → spec and backend status
	pins map[string]map[string]*pinnedRoot // environment UID → root name → pinned directory
}

// liveEnv is what the node knows of an allocated environment in this process.
type liveEnv struct {
	spec   backends.Spec
	status backends.Status
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{envs: map[string]*liveEnv{}, pins: map[string]map[string]*pinnedRoot{}}
}

// remember records an environment's latest backend status.
func (r *Registry) remember(spec backends.Spec, st backends.Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.envs[spec.ID] = &liveEnv{spec: spec, status: st}
}

// Forget drops an environment and closes its pinned roots.
func (r *Registry) Forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pins[id] {
		_ = p.root.Close()
	}
	delete(r.pins, id)
	delete(r.envs, id)
}

// Mounted returns the environment's roots if it is ready in this process.
func (r *Registry) Mounted(envUID string) ([]backends.MountedRoot, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.envs[envUID]
	if !ok || e.status.Phase != backends.PhaseReady {
		return nil, false
	}
	return e.status.Roots, true
}

// Ref returns "namespace/name" of an environment of this process, or "".
func (r *Registry) Ref(envUID string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.envs[envUID]; e != nil {
		return e.spec.Ref
	}
	return ""
}

// pinsOf returns the pinned roots of an environment (the map is never mutated after it is
// stored: pin replaces it).
func (r *Registry) pinsOf(envUID string) map[string]*pinnedRoot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pins[envUID]
}

type pinnedRoot struct {
	root *fsaccess.Root
	id   fsaccess.Identity
	path string
}

func identityString(id fsaccess.Identity) string { return fmt.Sprintf("%d:%d", id.Dev, id.Ino) }

// pin pins the host roots of a ready environment (first pass) or verifies them (later
// passes) and returns the identities to record. recorded holds the identities a previous
// process pinned. The stored map of an environment is replaced, never mutated, so pinsOf's
// readers hold a stable copy.
func (r *Registry) pin(envUID string, roots []backends.MountedRoot, recorded map[string]string) (map[string]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pins := map[string]*pinnedRoot{}
	for name, p := range r.pins[envUID] {
		pins[name] = p
	}
	ids := map[string]string{}
	fresh := map[string]*pinnedRoot{}
	fail := func(err error) (map[string]string, error) {
		for _, p := range fresh {
			_ = p.root.Close()
		}
		return nil, err
	}
	for _, mr := range roots {
		if mr.Path == "" {
			continue // a VM root lives in the guest
		}
		if p := pins[mr.Name]; p != nil {
			if err := p.verify(mr.Path); err != nil {
				return fail(err)
			}
			ids[mr.Name] = identityString(p.id)
			continue
		}
		r, err := fsaccess.PinRoot(mr.Path)
		if err != nil {
			if c := string(actuation.CodeOf(err)); c == string(actuation.CodeSymlinkEscape) {
				return fail(actuation.Refusef(actuation.CodeRootChanged, "root %s: %q now passes through a symlink: %v", mr.Name, mr.Path, err))
			}
			return fail(actuation.Refusef(actuation.CodeRootInvalid, "root %s: pinning %q: %v", mr.Name, mr.Path, err))
		}
		id, err := r.Identity()
		if err != nil {
			_ = r.Close()
			return fail(err)
		}
		if want := recorded[mr.Name]; want != "" && want != identityString(id) {
			_ = r.Close()
			return fail(actuation.Refusef(actuation.CodeRootChanged, "root %s: %q is no longer the directory pinned at allocation (%s, now %s)",
				mr.Name, mr.Path, want, identityString(id)))
		}
		fresh[mr.Name] = &pinnedRoot{root: r, id: id, path: mr.Path}
		ids[mr.Name] = identityString(id)
	}
	for name, p := range fresh {
		pins[name] = p
	}
	r.pins[envUID] = pins
	return ids, nil
}

// verify checks that path still names the pinned directory.
func (p *pinnedRoot) verify(path string) error {
	if path != p.path {
		return actuation.Refusef(actuation.CodeRootChanged, "root now resolves to %q, pinned %q", path, p.path)
	}
	id, err := fsaccess.PathIdentity(path)
	if err != nil {
		return actuation.Refusef(actuation.CodeRootChanged, "root %q: %v", path, err)
	}
	if id != p.id {
		return actuation.Refusef(actuation.CodeRootChanged, "%q is no longer the directory pinned at allocation (%s, now %s)",
			path, identityString(p.id), identityString(id))
	}
	return nil
}

// VerifyRoots checks, right before a process starts with them, that every host root of the
// environment still names its pinned directory.
func (r *Registry) VerifyRoots(envUID string, roots []backends.MountedRoot) error {
	pins := r.pinsOf(envUID)
	for _, mr := range roots {
		if mr.Path == "" {
			continue
		}
		p := pins[mr.Name]
		if p == nil {
			return actuation.Refusef(actuation.CodeRootChanged, "root %s was never pinned", mr.Name)
		}
		if err := p.verify(mr.Path); err != nil {
			return fmt.Errorf("root %s: %w", mr.Name, err)
		}
	}
	return nil
}

// PinnedRoot returns the pinned root of an environment (owned by the registry: never close it).
func (r *Registry) PinnedRoot(envUID, name string) (*fsaccess.Root, error) {
	if p := r.pinsOf(envUID)[name]; p != nil {
		return p.root, nil
	}
	return nil, actuation.Refusef(actuation.CodeRootChanged, "root %s of environment %s is not pinned on this node", name, envUID)
}
