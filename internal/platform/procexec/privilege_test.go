package procexec

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompEval runs a compiled filter on a synthetic seccomp_data (this architecture's
// audit arch, syscall name, arguments) in the BPF interpreter of golang.org/x/net/bpf and
// returns the filter's verdict.
type seccompEval struct {
	t    *testing.T
	vm   *bpf.VM
	info *arch.Info
}

func newSeccompEval(t *testing.T, prog []unix.SockFilter) *seccompEval {
	t.Helper()
	insts := make([]bpf.Instruction, len(prog))
	for i, f := range prog {
		insts[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}.Disassemble()
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	return &seccompEval{t: t, vm: vm, info: info}
}

// verdict is the filter's return value for name(args...); ok is false when the
// architecture has no such syscall.
func (e *seccompEval) verdict(name string, args ...uint64) (uint32, bool) {
	e.t.Helper()
	nr, ok := e.info.SyscallNames[name]
	if !ok {
		return 0, false
	}
	// struct seccomp_data { int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]; }.
	// The interpreter loads 32-bit words big-endian; the filter addresses the low and high
	// halves of each argument by the native (little-endian) layout, so each word is
	// stored big-endian at the offset the kernel would have it.
	pkt := make([]byte, 64)
	binary.BigEndian.PutUint32(pkt[0:], uint32(nr))
	binary.BigEndian.PutUint32(pkt[4:], uint32(e.info.ID))
	for i, a := range args {
		off := 16 + 8*i
		lo, hi := off, off+4
		if !littleEndian() {
			lo, hi = hi, lo
		}
		binary.BigEndian.PutUint32(pkt[lo:], uint32(a))
		binary.BigEndian.PutUint32(pkt[hi:], uint32(a>>32))
	}
	v, err := e.vm.Run(pkt)
	if err != nil {
		e.t.Fatalf("%s: %v", name, err)
	}
	return uint32(v), true
}

func littleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafePointer(&x)) == 1
}

func verdictName(v uint32) string {
	switch {
	case v == unix.SECCOMP_RET_ALLOW:
		return "allow"
	case v&unix.SECCOMP_RET_ACTION_FULL == unix.SECCOMP_RET_ERRNO:
		return unix.ErrnoName(unix.Errno(v & unix.SECCOMP_RET_DATA))
	}
	return fmt.Sprintf("%#x", v)
}

// TestSeccompRefusesPrivilegeBits: the compiled filters (the sandbox's and the VMM's)
// refuse with EPERM every call that would set S_ISUID or S_ISGID through a mode argument,
// whatever else is in the mode or the argument's upper half; the same calls without
// those bits pass; openat2 gets ENOSYS; mknod/mknodat are refused for every file type.
func TestSeccompRefusesPrivilegeBits(t *testing.T) {
	sandbox, err := seccompProgram()
	if err != nil {
		t.Fatal(err)
	}
	vmm, err := VMMSeccompProgram()
	if err != nil {
		t.Fatal(err)
	}
	const garbage = 0xdead_beef_0000_0000 // upper half of a 32-bit mode_t: ignored by the kernel
	for _, p := range []struct {
		name string
		prog []unix.SockFilter
	}{{"sandbox", sandbox}, {"vmm", vmm}} {
		t.Run(p.name, func(t *testing.T) {
			ev := newSeccompEval(t, p.prog)
			seen := 0
			for _, r := range privilegeModeRules {
				for _, mode := range []uint64{0o4755, 0o2755, 0o6777, 0o4000, 0o2000, unix.S_IFREG | 0o4644, garbage | 0o2755} {
					args := make([]uint64, 6)
					args[r.arg] = mode
					if r.name == "open" || r.name == "openat" {
						args[r.arg-1] = unix.O_CREAT | unix.O_WRONLY
					}
					v, ok := ev.verdict(r.name, args...)
					if !ok {
						break // not on this architecture
					}
					seen++
					if v != unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM) {
						t.Errorf("%s with mode %#o: %s, want EPERM", r.name, mode, verdictName(v))
					}
				}
				for _, mode := range []uint64{0o755, 0o1777, 0o644, garbage | 0o755} {
					args := make([]uint64, 6)
					args[r.arg] = mode
					if v, ok := ev.verdict(r.name, args...); ok && v != unix.SECCOMP_RET_ALLOW && r.name != "fchmodat2" {
						t.Errorf("%s with mode %#o: %s, want allow", r.name, mode, verdictName(v))
					}
				}
			}
			if seen == 0 {
				t.Fatal("no mode rule applies on this architecture")
			}
			// open/openat with the bits refused whatever the flags (O_CREAT or not).
			if v, _ := ev.verdict("openat", 0, 0, unix.O_RDONLY, 0o4755); v != unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM) {
				t.Errorf("openat(O_RDONLY, 04755): %s", verdictName(v))
			}
			if v, _ := ev.verdict("openat", 0, 0, unix.O_RDONLY, 0); v != unix.SECCOMP_RET_ALLOW {
				t.Errorf("openat(O_RDONLY): %s", verdictName(v))
			}
			if v, ok := ev.verdict("openat2", 0, 0, 0, 24); ok && v != unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS) {
				t.Errorf("openat2: %s, want ENOSYS", verdictName(v))
			}
			for _, name := range []string{"mknod", "mknodat"} {
				arg := uint32(1)
				if name == "mknodat" {
					arg = 2
				}
				for _, typ := range []uint64{unix.S_IFIFO, unix.S_IFSOCK, unix.S_IFCHR, unix.S_IFBLK, unix.S_IFREG, 0} {
					args := make([]uint64, 6)
					args[arg] = typ | 0o644
					if v, ok := ev.verdict(name, args...); ok && v != unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM) {
						t.Errorf("%s type %#o: %s, want EPERM", name, typ, verdictName(v))
					}
				}
			}
			// The rest of the policy is unchanged: ordinary calls pass.
			for _, name := range []string{"read", "write", "fchown", "execve"} {
				if v, _ := ev.verdict(name, 0, 0, 0); v != unix.SECCOMP_RET_ALLOW {
					t.Errorf("%s: %s", name, verdictName(v))
				}
			}
		})
	}
}

// TestOwnerNamespaceCacheBounded: owner namespaces are cached per (uid, gid, host uid) and
// the cache never holds more than maxOwnerNamespaces; every descriptor handed out is a
// user namespace with the asked map, also after its entry was evicted.
func TestOwnerNamespaceCacheBounded(t *testing.T) {
	requireSandbox(t)
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for i := 0; i < maxOwnerNamespaces+3; i++ {
		fd, err := ownerUserns(uint32(70000+i), uint32(80000+i), DefaultSandboxUID)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
	ownerNS.Lock()
	n := len(ownerNS.fds)
	ownerNS.Unlock()
	if n > maxOwnerNamespaces {
		t.Errorf("%d cached namespaces, cap %d", n, maxOwnerNamespaces)
	}
	// The first (evicted) descriptor still names its namespace: a user namespace whose
	// owner is this process's user and that is not ours.
	link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fds[0]))
	self, _ := os.Readlink("/proc/self/ns/user")
	if err != nil || !strings.HasPrefix(link, "user:[") || link == self {
		t.Errorf("descriptor of an evicted namespace: %q %v (self %q)", link, err, self)
	}
	again, err := ownerUserns(uint32(70000+maxOwnerNamespaces+2), uint32(80000+maxOwnerNamespaces+2), DefaultSandboxUID)
	if err != nil {
		t.Fatal(err)
	}
	fds = append(fds, again)
	a, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", again))
	b, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fds[maxOwnerNamespaces+2]))
	if a != b {
		t.Errorf("a cached key gave a new namespace: %s vs %s", a, b)
	}
}
