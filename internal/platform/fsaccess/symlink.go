package fsaccess

import "golang.org/x/sys/unix"

// Symlink creates rel as a symbolic link holding target. The link is created, never
// followed: its parent is resolved beneath the root like every other write, and what the
// target names is the caller's business (an extractor checks it stays inside the tree).
func (r *Root) Symlink(target, rel string) error {
	pfd, base, err := r.checkedParent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Symlinkat(target, pfd, base); err != nil {
		return r.writeErr("symlink", rel, err)
	}
	return nil
}
