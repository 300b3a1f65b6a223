package actuation

import (
	"fmt"
	"path"
	"strings"
)

// Host-root tenancy (issue 25 item 4): a host directory, and every parent or child of it,
// is bound by at most one Environment at a time, whatever its namespace. What one tenant
// leaves in a directory (hooks, build scripts, binaries) is trusted by the next one that
// runs there, so two tenants over one tree are one tenant with two names. Read-only
// sharing (every binder read-only) is allowed only where the node's policy says so
// (RootSharing); the default allows none.
//
// One rule, two callers: the Environment webhook checks the clean spec paths of every
// Environment it can see (lexically: it cannot resolve a node's symlinks), and the node
// agent checks the symlink-resolved directories against its own persistent table, in one
// store transaction, before it allocates — admission is not transactional, the node's
// table is the real guard.

// RootSharing is a node's policy for two Environments binding overlapping host
// directories.
type RootSharing string

// Root sharing policies.
const (
	// RootSharingNone: one Environment per host tree, read-only or not (the default).
	RootSharingNone RootSharing = "None"
	// RootSharingReadOnly: several Environments may bind overlapping directories when
	// every one of them binds it read-only; a read-write binding is still exclusive.
	RootSharingReadOnly RootSharing = "ReadOnly"
)

// ValidateRootSharing refuses a policy outside the vocabulary ("" is RootSharingNone).
func ValidateRootSharing(s RootSharing) *Refusal {
	switch s {
	case "", RootSharingNone, RootSharingReadOnly:
		return nil
	}
	return Refuse(CodePolicyInvalid, "rootSharing", "must be %q or %q (got %q)", RootSharingNone, RootSharingReadOnly, truncateForMessage(string(s)))
}

// HostClaim is one host directory an Environment binds.
type HostClaim struct {
	// Holder is the Environment's UID: claims of the same holder never conflict.
	Holder string `json:"holder"`
	// Ref is namespace/name, for messages.
	Ref string `json:"ref,omitempty"`
	// Root is the root's name in its Environment, for messages.
	Root string `json:"root,omitempty"`
	// Path is absolute and clean; the node passes the symlink-resolved directory.
	Path     string `json:"path"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// HostPathsOverlap reports whether two absolute paths are the same directory or one lies
// beneath the other, component-wise ("/a/b" and "/a/bc" do not overlap). Both are cleaned
// first; "/" overlaps everything.
func HostPathsOverlap(a, b string) bool {
	a, b = path.Clean(a), path.Clean(b)
	within := func(p, dir string) bool {
		return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
	}
	return within(a, b) || within(b, a)
}

// CheckHostTenancy refuses, with root-in-use, the first claim of want that overlaps a
// claim of held by another holder, unless sharing is RootSharingReadOnly and both bind
// read-only. Claims of want's own holder in held are ignored (an Environment re-checked
// by a later pass does not conflict with itself).
func CheckHostTenancy(want, held []HostClaim, sharing RootSharing) *Refusal {
	for _, w := range want {
		for _, h := range held {
			if h.Holder == w.Holder || !HostPathsOverlap(w.Path, h.Path) {
				continue
			}
			if sharing == RootSharingReadOnly && w.ReadOnly && h.ReadOnly {
				continue
			}
			rel := "the same directory as"
			switch {
			case path.Clean(w.Path) == path.Clean(h.Path):
			case HostPathsOverlap(w.Path, h.Path) && strings.HasPrefix(path.Clean(w.Path), strings.TrimSuffix(path.Clean(h.Path), "/")+"/"):
				rel = "inside"
			default:
				rel = "a parent of"
			}
			return Refuse(CodeRootInUse, w.Root, "host directory %q must not be bound: it is %s %q, bound %s by environment %s (root %s); %s",
				w.Path, rel, h.Path, access(h.ReadOnly), h.Ref, h.Root, sharingNote(sharing))
		}
	}
	return nil
}

func access(readOnly bool) string {
	if readOnly {
		return "read-only"
	}
	return "read-write"
}

func sharingNote(s RootSharing) string {
	if s == RootSharingReadOnly {
		return "a host directory has one read-write tenant at a time (this node shares only read-only bindings)"
	}
	return fmt.Sprintf("a host directory has one tenant at a time (root sharing policy %s)", RootSharingNone)
}
