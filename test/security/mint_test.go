package security

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// mintProbeNames are the probe lines of the probe's mintProbes (issue 25 item 1): a setuid
// or setgid bit through every syscall that takes a mode, a FIFO and a socket inode, a
// file capability — on the workspace and (suffix -tmp) on the sandbox's tmp. chmod, open,
// creat and mkdir exist only on amd64.
func mintProbeNames() []string {
	base := []string{"fchmod-4", "fchmod-2", "fchmodat-4", "fchmodat-2", "fchmodat2-4", "fchmodat2-2",
		"openat-creat-2", "openat2-creat-4", "mkdirat-2", "mknod-fifo", "mknodat-socket", "setxattr-fcap", "fsetxattr-fcap"}
	if runtime.GOARCH == "amd64" {
		base = append(base, "chmod-4", "chmod-2", "open-creat-4", "creat-4", "mkdir-2")
	}
	var out []string
	for _, n := range base {
		out = append(out, n, n+"-tmp")
	}
	return out
}

// assertNothingMinted walks dirs on the host (the workspace or managed copy, the agent's
// state dir with the sandboxes' private tmp dirs) and fails for every file carrying a
// setuid or setgid bit or a security.capability attribute, and for every FIFO or socket
// inode the probe left.
func assertNothingMinted(t *testing.T, where string, dirs ...string) {
	t.Helper()
	var bad []string
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // removed while walking (a finished command's tmp)
				}
				return err
			}
			fi, err := e.Info()
			if err != nil {
				return nil
			}
			m := fi.Mode()
			if m&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
				bad = append(bad, p+" mode "+m.String())
			}
			if m&(fs.ModeNamedPipe|fs.ModeSocket) != 0 && strings.HasPrefix(e.Name(), ".probe-") {
				bad = append(bad, p+" is a "+m.Type().String())
			}
			if n, err := unix.Lgetxattr(p, "security.capability", nil); err == nil && n > 0 {
				bad = append(bad, p+" has security.capability")
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: walking %s: %v", where, d, err)
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s: the host holds %d privilege(s) a sandboxed command minted:\n  %s", where, len(bad), strings.Join(bad, "\n  "))
	}
}

// TestMintedFilesOwnedByRootOwner: on a host root owned by an unprivileged uid (65534,
// as an operator's checkout would be), what the command creates belongs to that uid and
// gid on disk — not to host root — and every privilege probe is still refused.
func TestMintedFilesOwnedByRootOwner(t *testing.T) {
	requireProcessSandbox(t)
	calibrate(t)
	const owner = 65534
	ns := namespace(t)
	dir := workDir(t, "unused")
	must(t, os.Chown(dir, owner, owner))
	environment(t, ns, dir, wbv1.BackendHostLocal, nil)
	c, out := runMake(t, ns, "probes", targetProbes, 60)
	if c.Status.Phase == wbv1.CommandRefused {
		t.Fatalf("the command was refused before it ran (%+v)", c.Status.Refusal)
	}
	assertRefused(t, "owned root", out)
	assertNothingMinted(t, "owned root", dir)
	ents, err := os.ReadDir(dir)
	must(t, err)
	created := 0
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".probe-mint-") {
			continue
		}
		created++
		var st unix.Stat_t
		must(t, unix.Lstat(filepath.Join(dir, e.Name()), &st))
		if st.Uid != owner || st.Gid != owner {
			t.Errorf("%s was created as %d:%d on disk, want the root's owner %d:%d", e.Name(), st.Uid, st.Gid, owner, owner)
		}
	}
	if created == 0 {
		t.Errorf("the command created nothing on the root (it could not write there): output %q", tail(out))
	}
}
