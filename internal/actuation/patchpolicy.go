package actuation

import (
	"io/fs"
	"strings"
)

// Workspace hygiene (issue 7 item 3). A FilePatch is proposed by an agent identity; what it
// may do is bounded by the Environment's host-owned spec.patchPolicy. The proposer's own
// spec.policy may narrow that, never widen it, and a few paths and modes that would turn
// a patch into code run by the next build tool or git invocation are refused unless the
// environment allows them.

// MaxPatchChangedFiles is the hard cap on the files one patch may change (the patch
// engine's patch-too-many-files bound).
const MaxPatchChangedFiles = 256

// EnvironmentPatchPolicy is the environment's ceiling on what patches may do. Its zero
// value is the safe default: creates allowed, deletes refused, no git metadata, no
// executable bits, at most MaxPatchChangedFiles files.
type EnvironmentPatchPolicy struct {
	DenyCreate       bool `json:"denyCreate,omitempty"` // creates refused (the default allows them)
	AllowDelete      bool `json:"allowDelete,omitempty"`
	AllowGitMetadata bool `json:"allowGitMetadata,omitempty"`
	AllowExecutable  bool `json:"allowExecutable,omitempty"`
	MaxChangedFiles  int  `json:"maxChangedFiles,omitempty"` // <=0: MaxPatchChangedFiles
}

// ProposedPatchPolicy is what the proposer's FilePatch spec.policy asks for.
type ProposedPatchPolicy struct {
	AllowCreate     bool `json:"allowCreate,omitempty"`
	AllowDelete     bool `json:"allowDelete,omitempty"`
	MaxChangedFiles int  `json:"maxChangedFiles,omitempty"` // <=0: the environment's bound
}

// EffectivePatchPolicy is what one patch may do: the proposal, capped by the environment.
type EffectivePatchPolicy struct {
	AllowCreate      bool `json:"allowCreate"`
	AllowDelete      bool `json:"allowDelete"`
	AllowGitMetadata bool `json:"allowGitMetadata"`
	AllowExecutable  bool `json:"allowExecutable"`
	MaxChangedFiles  int  `json:"maxChangedFiles"`
}

// CapPatchPolicy refuses a proposal that asks for a permission the environment withholds
// (patch-policy-exceeds-environment: a proposer never widens the host's policy) and returns
// the effective policy. A count above the environment's bound is capped to it, since the
// count is a bound, not a permission. Git metadata and executable bits are never part of a
// proposal: only the environment grants them.
func CapPatchPolicy(env EnvironmentPatchPolicy, p ProposedPatchPolicy) (EffectivePatchPolicy, *Refusal) {
	envMax := env.MaxChangedFiles
	if envMax <= 0 || envMax > MaxPatchChangedFiles {
		envMax = MaxPatchChangedFiles
	}
	eff := EffectivePatchPolicy{AllowCreate: p.AllowCreate, AllowDelete: p.AllowDelete,
		AllowGitMetadata: env.AllowGitMetadata, AllowExecutable: env.AllowExecutable, MaxChangedFiles: envMax}
	if p.MaxChangedFiles > 0 && p.MaxChangedFiles < envMax {
		eff.MaxChangedFiles = p.MaxChangedFiles
	}
	switch {
	case p.AllowCreate && env.DenyCreate:
		return EffectivePatchPolicy{}, Refuse(CodePatchPolicyExceedsEnvironment, "spec.policy.allowCreate",
			"must not be true: the environment's patchPolicy does not allow creating files")
	case p.AllowDelete && !env.AllowDelete:
		return EffectivePatchPolicy{}, Refuse(CodePatchPolicyExceedsEnvironment, "spec.policy.allowDelete",
			"must not be true: the environment's patchPolicy does not allow deleting files")
	}
	return eff, nil
}

// IsGitMetadataPath reports whether the relative path p names git metadata that runs code
// or redirects where code comes from: a `.git` file or directory entry itself (a gitfile can
// point the repository anywhere), `<...>/.git/config` (core.fsmonitor, core.hooksPath,
// filter drivers, aliases), `config.worktree`, and anything under `<...>/.git/hooks/`
// — also inside nested repositories and `.git/modules/<name>/`, and compared without
// regard to ASCII case (case-insensitive filesystems resolve `.GIT/Config` to the same file).
func IsGitMetadataPath(p string) bool {
	comps := strings.Split(p, "/")
	for i, c := range comps {
		if !strings.EqualFold(c, ".git") {
			continue
		}
		rest := comps[i+1:]
		if len(rest) == 0 {
			return true // the .git entry itself
		}
		// Walk the git directory: its own config and hooks, and those of the
		// repositories it nests under modules/ and worktrees/.
		for j, r := range rest {
			last := j == len(rest)-1
			switch {
			case strings.EqualFold(r, "hooks"):
				return true
			case last && (strings.EqualFold(r, "config") || strings.EqualFold(r, "config.worktree") || strings.EqualFold(r, "commondir") || strings.EqualFold(r, "gitdir")):
				return true
			}
		}
	}
	return false
}

// CheckPatchTarget is the hygiene rule for one file a patch touches: git metadata
// (patch-git-metadata-forbidden) unless the environment allows it, and a resulting mode
// with an executable bit that the file did not already have (patch-executable-forbidden)
// unless the environment allows it. existed/oldMode describe the file before the patch.
func CheckPatchTarget(pol EffectivePatchPolicy, path string, existed bool, oldMode, newMode fs.FileMode) *Refusal {
	if !pol.AllowGitMetadata && IsGitMetadataPath(path) {
		return Refuse(CodePatchGitMetadataForbidden, path,
			"must not be created, modified or deleted by a patch: git metadata runs code (hooks, config); the environment's patchPolicy.gitMetadata is Denied")
	}
	const exec = fs.FileMode(0o111)
	gained := newMode.Perm() & exec
	if existed {
		gained &^= oldMode.Perm() & exec
	}
	if !pol.AllowExecutable && gained != 0 {
		return Refuse(CodePatchExecutableForbidden, path,
			"must not be given an executable bit (mode %o) by a patch: the environment's patchPolicy.executableFiles is Denied", newMode.Perm())
	}
	return nil
}
