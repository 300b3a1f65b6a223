package fsaccess

import (
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// adoptOwner gives fd — a file or directory this process has just created beneath r —
// the owner of r's directory when that is not root:root. A host root an operator owns
// keeps one owner whoever writes it: the agent's FilePatches here, and a sandboxed
// command through its idmapped mount (procexec maps such a root to its owner), so a
// command can still change a file a patch wrote. Roots owned by root (managed copies,
// the agent's state) are unchanged. Only a privileged agent can chown; otherwise this
// is a no-op (what it creates is its own anyway).
func (r *Root) adoptOwner(fd int, rel string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(r.fd, &st); err != nil {
		return r.writeErr("stat the root of", rel, err)
	}
	if st.Uid == 0 && st.Gid == 0 {
		return nil
	}
	if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
		return r.writeErr("chown", rel, err)
	}
	return nil
}

// setModeOwner sets exactly perm&0o777 on fd (rel, just created or opened beneath r;
// umask does not apply to fchmod) and then gives it the root's owner (adoptOwner).
func (r *Root) setModeOwner(fd int, rel string, perm fs.FileMode) error {
	if err := unix.Fchmod(fd, uint32(perm&0o777)); err != nil {
		return r.writeErr("chmod", rel, err)
	}
	return r.adoptOwner(fd, rel)
}
