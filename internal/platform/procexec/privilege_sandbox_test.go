package procexec

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSandboxCannotMintPrivilege: inside a real sandbox, chmod/mkdir/mknod tools and the
// kernel answer EPERM for setuid, setgid, FIFOs and sockets, and setcap's attribute write
// is refused by the empty capability sets; from the host nothing in the root carries a
// privilege afterwards.
func TestSandboxCannotMintPrivilege(t *testing.T) {
	requireSandbox(t)
	root := t.TempDir()
	script := `umask 022; : > f; chmod 0755 f
chmod 4755 f 2>/dev/null && echo chmod-u-ok
chmod g+s f 2>/dev/null && echo chmod-g-ok
mkdir -m 2755 d 2>/dev/null && echo mkdir-g-ok
mkfifo p 2>/dev/null && echo mkfifo-ok
mknod q p 2>/dev/null && echo mknod-p-ok
cp f /tmp/g && chmod u+s /tmp/g 2>/dev/null && echo tmp-chmod-ok
if command -v setcap >/dev/null; then setcap cap_setuid+ep f 2>/dev/null && echo setcap-ok; fi
echo done`
	res := run(t, Spec{Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin"}, Dir: root, WritableRoots: []string{root}})
	if got := strings.TrimSpace(string(res.Output)); got != "done" {
		t.Errorf("privileged mode changes got through: %q", got)
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeNamedPipe|os.ModeSocket) != 0 {
			t.Errorf("%s on the host: %v", e.Name(), fi.Mode())
		}
		if n, err := unix.Lgetxattr(filepath.Join(root, e.Name()), "security.capability", nil); err == nil && n > 0 {
			t.Errorf("%s carries security.capability", e.Name())
		}
	}
}

// TestSandboxMountsNosuidNodev: every mount the program sees is nosuid, and every one but
// the bound device files is nodev (roots, the private tmp, /dev/shm, the system tree).
func TestSandboxMountsNosuidNodev(t *testing.T) {
	requireSandbox(t)
	rw, ro := t.TempDir(), t.TempDir()
	res := run(t, Spec{Argv: []string{"/bin/cat", "/proc/self/mountinfo"}, Dir: rw, WritableRoots: []string{rw}, ReadableRoots: []string{ro}})
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(res.Output)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("mountinfo line %q", line)
		}
		target, opts := f[4], ","+f[5]+","
		seen[target] = true
		if !strings.Contains(opts, ",nosuid,") {
			t.Errorf("%s is mounted without nosuid (%s)", target, f[5])
		}
		if !strings.Contains(opts, ",nodev,") && !slices.Contains(devFiles, target) && !strings.HasPrefix(target, "/dev/pts/") {
			t.Errorf("%s is mounted without nodev (%s)", target, f[5])
		}
	}
	for _, want := range []string{"/", rw, ro, SandboxTmp, "/dev/shm", "/usr"} {
		if !seen[want] {
			t.Errorf("no mount at %s in:\n%s", want, res.Output)
		}
	}
}

// TestRootOwnerThroughIdmap: a root owned by an unprivileged uid/gid appears owned by the
// sandbox's root, and what the program creates there is stored as that uid/gid on disk
// (not host root); a root-owned file inside appears unmapped and is not writable.
func TestRootOwnerThroughIdmap(t *testing.T) {
	requireSandbox(t)
	root := t.TempDir()
	const uid, gid = 1234, 5678
	if err := os.WriteFile(filepath.Join(root, "rootfile"), []byte("r\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(root, uid, gid); err != nil {
		t.Fatal(err)
	}
	res := run(t, Spec{Argv: []string{"/bin/sh", "-c", `stat -c '%u:%g' . rootfile; echo x > f && mkdir d && echo wrote; (echo y >> rootfile) 2>/dev/null || echo denied`},
		Env: []string{"PATH=/usr/bin:/bin"}, Dir: root, WritableRoots: []string{root}})
	want := "0:0\n65534:65534\nwrote\ndenied"
	if got := strings.TrimSpace(string(res.Output)); got != want {
		t.Fatalf("output %q, want %q", got, want)
	}
	for _, n := range []string{"f", "d"} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(root, n), &st); err != nil || st.Uid != uid || st.Gid != gid {
			t.Errorf("%s created as %d:%d (err %v), want %d:%d", n, st.Uid, st.Gid, err, uid, gid)
		}
	}
}
