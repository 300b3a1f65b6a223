//go:build linux

package procexec

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	seccompbpf "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	mobyseccomp "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The sandbox's seccomp filter is Docker's default profile (the policy source maintained
// in github.com/moby/profiles/seccomp, evaluated for a process with NO capabilities on
// this kernel and architecture) compiled to BPF by github.com/elastic/go-seccomp-bpf,
// with these further restrictions:
//
//   - socket(2) is allowed only for the families Docker allows minus AF_UNIX, AF_NETLINK,
//     AF_PACKET and AF_VSOCK: a network namespace does not isolate pathname UNIX sockets
//     (host daemons' sockets), netlink and packet sockets reach kernel interfaces, and
//     AF_VSOCK reaches the hypervisor;
//   - socketpair(2) is denied (it only creates AF_UNIX pairs);
//   - ptrace(2), process_vm_readv/writev(2) (Docker allows them on kernels >= 4.8) and
//     every io_uring syscall are denied;
//   - clone3(2) fails with ENOSYS (as in Docker's profile: its flags live in memory a
//     filter cannot inspect, and libc falls back to clone(2), whose namespace flags the
//     profile does filter);
//   - no privilege can be minted on a file (systemd's RestrictSUIDSGID=, see
//     privilegeModeRules): chmod(2), fchmod(2), fchmodat(2), fchmodat2(2), open(2),
//     openat(2), creat(2), mkdir(2) and mkdirat(2) with S_ISUID or S_ISGID in their mode
//     argument fail with EPERM; openat2(2), whose mode lives in a struct a filter cannot
//     read, fails with ENOSYS (libc falls back to openat(2), as under systemd);
//     mknod(2) and mknodat(2) are denied whatever the file type (see deniedSyscalls).
//     File capabilities need no rule: setting security.capability (or any security.*
//     attribute) needs CAP_SETFCAP / CAP_SYS_ADMIN, and every capability set of a
//     sandboxed process is empty.
//
// Syscalls of a foreign ABI (i386 through int 0x80) fail with EPERM and x32 ones with
// ENOSYS (go-seccomp-bpf's architecture check). Everything not allowed fails with EPERM,
// Docker's default errno. The filter is built once per process and handed to the helper
// as BPF in its configuration.

// deniedSocketFamilies are refused through socket(2) and socketpair(2).
var deniedSocketFamilies = []uint64{unix.AF_UNIX, unix.AF_NETLINK, unix.AF_PACKET, unix.AF_VSOCK}

// deniedSyscalls are removed from Docker's allow list.
var deniedSyscalls = []string{
	"ptrace", "process_vm_readv", "process_vm_writev",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"socketpair", "socket", // socket is re-added per family below
	"clone3", // ENOSYS in the refusal prefix
	// mknod(2)/mknodat(2): a device node needs CAP_MKNOD anyway, a regular file is what
	// open(2)/creat(2) make (libc never creates one through mknod), and a FIFO or a
	// socket inode left on a root is a trap for the host tool that opens it next (a
	// FIFO blocks its reader forever). No build needs to leave one behind on a root,
	// so the whole call is refused rather than filtering on the file type.
	"mknod", "mknodat",
	"openat2", // ENOSYS in the refusal prefix
}

// privilegeBits are the mode bits no sandboxed process may set on a file.
const privilegeBits = unix.S_ISUID | unix.S_ISGID

// modeArg is a syscall that takes a file mode, with the index of that argument.
type modeArg struct {
	name string
	arg  uint32
}

// privilegeModeRules are the syscalls that set or create a file with a mode: with
// S_ISUID or S_ISGID in that argument they fail with EPERM (systemd's
// RestrictSUIDSGID= set). open/openat use the mode only with O_CREAT or O_TMPFILE; the
// bits are refused whatever the flags. Names absent on this architecture (arm64 has no
// chmod, open, creat, mkdir) are skipped.
var privilegeModeRules = []modeArg{
	{"chmod", 1}, {"fchmod", 1}, {"fchmodat", 2}, {"fchmodat2", 2},
	{"open", 2}, {"openat", 3}, {"creat", 1}, {"mkdir", 1}, {"mkdirat", 2},
}

// enosysSyscalls fail with ENOSYS so that libc falls back to a call the filter can
// inspect: clone3's flags and openat2's mode live in structs in memory.
var enosysSyscalls = []string{"clone3", "openat2"}

var (
	filterOnce sync.Once
	filterProg []unix.SockFilter
	filterErr  error
)

// seccompProgram returns the sandbox filter as BPF (built once).
func seccompProgram() ([]unix.SockFilter, error) {
	filterOnce.Do(func() { filterProg, filterErr = buildSeccompProgram() })
	return filterProg, filterErr
}

// SeccompPolicy returns the go-seccomp-bpf policy of the sandbox (for inspection and
// tests): Docker's default profile for a process without capabilities, restricted as
// documented above.
func SeccompPolicy() (*seccompbpf.Policy, error) { return seccompPolicy(socketFamilies, false) }

// VMMSeccompProgram is the filter of the VMM processes (QEMU under its own -sandbox too,
// and vhost-device-vsock, which has none): the sandbox's policy, except that socket(2)
// and socketpair(2) are allowed for AF_UNIX only — the vhost-user, hybrid-vsock and
// serial sockets are all they use.
func VMMSeccompProgram() ([]unix.SockFilter, error) {
	pol, err := seccompPolicy(func([]specs.LinuxSyscall) []uint64 { return []uint64{unix.AF_UNIX} }, true)
	if err != nil {
		return nil, err
	}
	return assembleSeccomp(pol)
}

func seccompPolicy(families func([]specs.LinuxSyscall) []uint64, unixPairs bool) (*seccompbpf.Policy, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: architecture: %w", err)
	}
	noCaps := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}}
	prof, err := mobyseccomp.GetDefaultProfile(noCaps)
	if err != nil {
		return nil, fmt.Errorf("seccomp: Docker default profile: %w", err)
	}
	if prof.DefaultAction != specs.ActErrno {
		return nil, fmt.Errorf("seccomp: Docker default profile has default action %q, want an errno", prof.DefaultAction)
	}
	known := func(name string) bool { _, ok := info.SyscallNames[name]; return ok }

	unconditional := map[string]bool{}
	var allow []string
	type cond struct {
		name string
		c    seccompbpf.ArgumentConditions
	}
	var conditional []cond
	for _, rule := range prof.Syscalls {
		if rule.Action != specs.ActAllow {
			continue // errno rules: the default action denies them anyway
		}
		for _, name := range rule.Names {
			if !known(name) || slices.Contains(deniedSyscalls, name) {
				continue // unknown to the BPF compiler's table: stays denied
			}
			if len(rule.Args) == 0 {
				if !unconditional[name] {
					unconditional[name] = true
					allow = append(allow, name)
				}
				continue
			}
			c, ok := convertArgs(rule.Args)
			if !ok {
				continue // an operator go-seccomp-bpf cannot express: stays denied
			}
			conditional = append(conditional, cond{name, c})
		}
	}
	var withArgs []seccompbpf.NameWithConditions
	for _, c := range conditional {
		if !unconditional[c.name] {
			withArgs = append(withArgs, seccompbpf.NameWithConditions{Name: c.name, Conditions: c.c})
		}
	}
	if unixPairs {
		withArgs = append(withArgs, seccompbpf.NameWithConditions{Name: "socketpair", Conditions: seccompbpf.ArgumentConditions{
			{Argument: 0, Operation: seccompbpf.Equal, Value: unix.AF_UNIX},
		}})
	}
	for _, fam := range families(prof.Syscalls) {
		withArgs = append(withArgs, seccompbpf.NameWithConditions{Name: "socket", Conditions: seccompbpf.ArgumentConditions{
			{Argument: 0, Operation: seccompbpf.Equal, Value: fam},
		}})
	}
	return &seccompbpf.Policy{
		DefaultAction: seccompbpf.ActionErrno, // EPERM, Docker's defaultErrnoRet
		Syscalls: []seccompbpf.SyscallGroup{{
			Names: allow, NamesWithCondtions: withArgs, Action: seccompbpf.ActionAllow,
		}},
	}, nil
}

// socketFamilies lists the socket(2) domains Docker's profile allows (equality and
// "less than" rules on argument 0) minus deniedSocketFamilies.
func socketFamilies(rules []specs.LinuxSyscall) []uint64 {
	var fams []uint64
	add := func(f uint64) {
		if !slices.Contains(deniedSocketFamilies, f) && !slices.Contains(fams, f) && f != unix.AF_UNSPEC {
			fams = append(fams, f)
		}
	}
	for _, r := range rules {
		if r.Action != specs.ActAllow || !slices.Contains(r.Names, "socket") || len(r.Args) != 1 || r.Args[0].Index != 0 {
			continue
		}
		switch a := r.Args[0]; a.Op {
		case specs.OpEqualTo:
			add(a.Value)
		case specs.OpLessThan:
			for f := uint64(1); f < a.Value && f < 64; f++ {
				add(f)
			}
		}
	}
	slices.Sort(fams)
	return fams
}

func convertArgs(args []specs.LinuxSeccompArg) (seccompbpf.ArgumentConditions, bool) {
	var out seccompbpf.ArgumentConditions
	for _, a := range args {
		c := seccompbpf.Condition{Argument: uint32(a.Index), Value: a.Value}
		switch a.Op {
		case specs.OpEqualTo:
			c.Operation = seccompbpf.Equal
		case specs.OpNotEqual:
			c.Operation = seccompbpf.NotEqual
		case specs.OpLessThan:
			c.Operation = seccompbpf.LessThan
		case specs.OpLessEqual:
			c.Operation = seccompbpf.LessOrEqual
		case specs.OpGreaterThan:
			c.Operation = seccompbpf.GreaterThan
		case specs.OpGreaterEqual:
			c.Operation = seccompbpf.GreaterOrEqual
		case specs.OpMaskedEqual:
			if a.ValueTwo != 0 {
				return nil, false // (arg & mask) == v with v != 0: not expressible
			}
			c.Operation = seccompbpf.BitsNotSet // (arg & mask) == 0
		default:
			return nil, false
		}
		out = append(out, c)
	}
	return out, true
}

func buildSeccompProgram() ([]unix.SockFilter, error) {
	pol, err := SeccompPolicy()
	if err != nil {
		return nil, err
	}
	return assembleSeccomp(pol)
}

func assembleSeccomp(pol *seccompbpf.Policy) ([]unix.SockFilter, error) {
	insts, err := pol.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble policy: %w", err)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	prefix, err := refusalPrefix(info)
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(append(prefix, insts...))
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble BPF: %w", err)
	}
	if len(raw) > 4096 {
		return nil, fmt.Errorf("seccomp: filter of %d instructions exceeds BPF_MAXINSNS", len(raw))
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// refusalPrefix is hand-assembled BPF that runs ahead of the policy (its jumps are
// relative, so prepending is safe): enosysSyscalls → ENOSYS, and privilegeModeRules with
// S_ISUID or S_ISGID in the mode argument → EPERM. It reloads the syscall number before
// each rule: go-seccomp-bpf (v1.6.0) does not reload it after an argument check fails,
// so rules with arguments placed in its groups would compare the next syscall number
// against an argument.
func refusalPrefix(info *arch.Info) ([]bpf.Instruction, error) {
	ldNr := bpf.LoadAbsolute{Off: 0, Size: 4} // seccomp_data.nr
	var body []bpf.Instruction
	for _, name := range enosysSyscalls {
		nr, ok := info.SyscallNames[name]
		if !ok {
			if name == "clone3" {
				return nil, errors.New("seccomp: clone3 unknown to the syscall table")
			}
			continue
		}
		body = append(body, ldNr,
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(nr), SkipTrue: 1},
			bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)})
	}
	for _, r := range privilegeModeRules {
		nr, ok := info.SyscallNames[r.name]
		if !ok {
			continue // not on this architecture (arm64 has no chmod, open, creat, mkdir)
		}
		body = append(body, ldNr,
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(nr), SkipTrue: 3},
			bpf.LoadAbsolute{Off: argLowOffset(r.arg), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: privilegeBits, SkipFalse: 1},
			bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)})
	}
	if len(body) > 250 {
		return nil, fmt.Errorf("seccomp: refusal prefix of %d instructions exceeds a short jump", len(body))
	}
	// A foreign architecture skips the prefix (the policy refuses it).
	return append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(info.ID), SkipTrue: uint8(len(body))},
	}, body...), nil
}

// argLowOffset is the offset in struct seccomp_data of the low 32 bits of argument i
// (args start at 16; each is 8 bytes in native byte order). Modes are 32-bit: the kernel
// ignores the high half, so the filter tests only the low one.
func argLowOffset(i uint32) uint32 {
	off := 16 + 8*i
	x := uint16(1)
	if *(*byte)(unsafePointer(&x)) == 0 { // big-endian
		off += 4
	}
	return off
}
