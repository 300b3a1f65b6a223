//go:build linux

package sandboxhelper

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
)

// Repository metadata the host executes stays host-owned (issue 25 item 2). Inside the
// sandbox's mount namespace, for every repository found under a writable root:
//
//   - its git directory (".git", each ".git/modules/<name>" of a submodule and each
//     ".git/worktrees/<name>", and the "modules" and "worktrees" directories themselves)
//     is bound onto itself: a mount point cannot be renamed or removed (EBUSY), so the
//     program cannot move a git directory aside and create a fresh one;
//   - hooks/, info/, config, commondir and config.worktree of each git directory are bound
//     read-only on top (EROFS to write, EBUSY to replace or rename). hooks/ and info/ are
//     created (empty) when missing, as git init would, so that none can be planted;
//   - a ".git" file (a gitdir link of a submodule or worktree) is bound read-only.
//
// Discovery is a bounded breadth-first walk of each writable root (no symlink followed,
// no git directory entered by the walk itself): at most MaxGitWalkDirs directories and
// MaxGitRepos repositories per sandbox. Beyond either cap the start is refused
// (git-metadata-unbounded) rather than run with some repositories unprotected; a profile
// whose commands need such trees, or need to write metadata, sets gitMetadata: Writable.
// The program runs only after the protection is in place.
const (
	MaxGitWalkDirs = 8192
	MaxGitRepos    = 64
)

// gitProtectedDirs and gitProtectedFiles are the entries of a git directory bound
// read-only.
var (
	gitProtectedDirs  = []string{"hooks", "info"}
	gitProtectedFiles = []string{"config", "commondir", "config.worktree"}
)

// gitMetaFailure is a refusal of the git metadata protection.
type gitMetaFailure struct {
	code string
	msg  string
}

func (f *gitMetaFailure) Error() string { return f.msg }

// protectGitMetadata applies the protection under each root (paths inside the sandbox, on
// the calling thread's mount namespace, before the program exists).
func protectGitMetadata(roots []string) error {
	budget := &gitBudget{dirs: MaxGitWalkDirs, repos: MaxGitRepos}
	for _, r := range roots {
		if err := protectRoot(r, budget); err != nil {
			return err
		}
	}
	return nil
}

type gitBudget struct{ dirs, repos int }

func protectRoot(root string, b *gitBudget) error {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open root %s: %w", root, err)
	}
	defer unix.Close(rfd)
	queue := []string{"."}
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		if b.dirs--; b.dirs < 0 {
			return &gitMetaFailure{code: string(actuation.CodeGitMetadataUnbounded), msg: fmt.Sprintf(
				"more than %d directories under the writable roots: repository metadata cannot all be protected (set the profile's gitMetadata: Writable to run here)", MaxGitWalkDirs)}
		}
		ents, err := readDirAt(rfd, dir)
		if err != nil {
			continue // unreadable to the sandbox's root: unreadable to the program too
		}
		for _, e := range ents {
			rel := filepath.Join(dir, e.name)
			if e.name == ".git" {
				if b.repos--; b.repos < 0 {
					return &gitMetaFailure{code: string(actuation.CodeGitMetadataUnbounded), msg: fmt.Sprintf(
						"more than %d repositories under the writable roots (set the profile's gitMetadata: Writable to run here)", MaxGitRepos)}
				}
				switch e.typ {
				case unix.DT_DIR:
					if err := protectGitDir(rfd, rel, 0, false); err != nil {
						return err
					}
				case unix.DT_REG:
					if err := bindSelf(rfd, rel, true); err != nil {
						return err
					}
				}
				continue
			}
			if e.typ == unix.DT_DIR {
				queue = append(queue, rel)
			}
		}
	}
	return nil
}

// maxGitNesting bounds modules/ within modules/ (nested submodules).
const maxGitNesting = 8

// protectGitDir protects one git directory rel (relative to rfd).
func protectGitDir(rfd int, rel string, depth int, linkedWorktree bool) error {
	if depth > maxGitNesting {
		return &gitMetaFailure{code: string(actuation.CodeGitMetadataUnbounded), msg: fmt.Sprintf("submodules nested deeper than %d in %s", maxGitNesting, rel)}
	}
	// The git directory becomes a mount point first; everything below is opened again
	// through it, so the read-only binds sit on the new mount.
	if err := bindSelf(rfd, rel, false); err != nil {
		return err
	}
	for _, d := range gitProtectedDirs {
		p := filepath.Join(rel, d)
		if !linkedWorktree { // a linked worktree's hooks and info are its common dir's
			if err := mkdirNoFollow(rfd, p); err != nil {
				return err
			}
		}
		if err := bindSelf(rfd, p, true); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
	}
	for _, f := range gitProtectedFiles {
		p := filepath.Join(rel, f)
		if err := bindSelf(rfd, p, true); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
	}
	for _, sub := range []string{"modules", "worktrees"} {
		p := filepath.Join(rel, sub)
		if err := protectGitContainer(rfd, p, sub == "modules", depth); err != nil {
			return err
		}
	}
	return nil
}

// protectGitContainer protects .git/modules or .git/worktrees: the directory itself and,
// below it, every git directory (one with a HEAD); other directories are intermediate
// components of a submodule name ("a/b") and are bound onto themselves too.
func protectGitContainer(rfd int, rel string, modules bool, depth int) error {
	ents, err := readDirAt(rfd, rel)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return nil
		}
		return fmt.Errorf("read %s: %w", rel, err)
	}
	if err := bindSelf(rfd, rel, false); err != nil {
		return err
	}
	for _, e := range ents {
		if e.typ != unix.DT_DIR {
			continue
		}
		p := filepath.Join(rel, e.name)
		var st unix.Stat_t
		isGitDir := unix.Fstatat(rfd, filepath.Join(p, "HEAD"), &st, unix.AT_SYMLINK_NOFOLLOW) == nil
		switch {
		case isGitDir:
			if err := protectGitDir(rfd, p, depth+1, !modules); err != nil {
				return err
			}
		case modules:
			if err := protectGitContainer(rfd, p, true, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

type dirEnt struct {
	name string
	typ  uint8
}

// readDirAt lists rel below rfd without following a symlink anywhere on the way.
func readDirAt(rfd int, rel string) ([]dirEnt, error) {
	fd, err := openBeneath(rfd, rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer func() { _ = f.Close() }()
	var out []dirEnt
	for {
		ents, err := f.ReadDir(256)
		for _, e := range ents {
			var typ uint8
			switch {
			case e.Type().IsDir():
				typ = unix.DT_DIR
			case e.Type().IsRegular():
				typ = unix.DT_REG
			case e.Type()&os.ModeSymlink != 0:
				typ = unix.DT_LNK
			}
			out = append(out, dirEnt{name: e.Name(), typ: typ})
		}
		if err != nil || len(ents) == 0 {
			return out, nil
		}
	}
}

func openBeneath(rfd int, rel string, flags int) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	for {
		fd, err := unix.Openat2(rfd, rel, &how)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		return fd, err
	}
}

// mkdirNoFollow creates rel (one component below an opened parent) when missing.
func mkdirNoFollow(rfd int, rel string) error {
	pfd, err := openBeneath(rfd, filepath.Dir(rel), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("open %s: %w", filepath.Dir(rel), err)
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, filepath.Base(rel), 0o755); err != nil && err != unix.EEXIST {
		if err == unix.EROFS || err == unix.EACCES || err == unix.EPERM {
			return nil // cannot be created by the program either
		}
		return fmt.Errorf("create %s: %w", rel, err)
	}
	return nil
}

// bindSelf binds rel (below rfd, no symlink followed) onto itself, read-only when ro. A
// symlink or special file at rel is refused (EINVAL wrapped) only for what must be
// protected; ENOENT is returned as is.
func bindSelf(rfd int, rel string, ro bool) error {
	fd, err := openBeneath(rfd, rel, unix.O_PATH)
	if err != nil {
		if err == unix.ELOOP {
			// A symlink where git metadata should be: git would follow it to content
			// elsewhere under a root. Refuse rather than guess.
			return &gitMetaFailure{code: string(actuation.CodeGitMetadataUnbounded), msg: "git metadata " + rel + " is a symbolic link"}
		}
		if err == unix.ENOENT {
			return err
		}
		return fmt.Errorf("open %s: %w", rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", rel, err)
	}
	if m := st.Mode & unix.S_IFMT; m != unix.S_IFDIR && m != unix.S_IFREG {
		return nil // not a place git reads metadata from
	}
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", rel, err)
	}
	defer unix.Close(tree)
	if ro {
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
			return fmt.Errorf("mount_setattr %s: %w", rel, err)
		}
	}
	if err := unix.MoveMount(tree, "", fd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s: %w", rel, err)
	}
	return nil
}

// gitProtectFailure maps an error of protectGitMetadata to the helper's failure.
func gitProtectFailure(err error) *helperFailure {
	var gf *gitMetaFailure
	if errors.As(err, &gf) {
		return failf(gf.code, "helper: %s", gf.msg)
	}
	return failf(string(actuation.CodeSandboxSetupFailed), "helper: protect git metadata: %s", strings.TrimSpace(err.Error()))
}
