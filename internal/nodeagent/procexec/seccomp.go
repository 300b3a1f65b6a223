//go:build amd64 || arm64

package procexec

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A network namespace does not isolate pathname UNIX sockets, and Landlock
// only mediates connecting to them from ABI 9 (LANDLOCK_ACCESS_FS_RESOLVE_UNIX).
// Without a further barrier a sandboxed command could reach host daemons
// through their sockets (containerd, the kubelet, the agent itself). The
// helper therefore installs a seccomp filter on the exec'ing thread that:
//
//   - fails socket(AF_UNIX, ...) with EAFNOSUPPORT (socketpair(2) stays
//     allowed: it creates connected pairs and reaches nothing outside);
//   - fails io_uring_setup(2) with ENOSYS (io_uring can create and connect
//     sockets without passing through the socket syscalls);
//   - fails syscalls of a foreign ABI (i386 via int 0x80, x32) with ENOSYS so
//     the filter cannot be bypassed by changing the calling convention.
//
// Everything else is allowed. The filter requires no_new_privs (set before).

// seccomp_data offsets (include/uapi/linux/seccomp.h).
const (
	seccompDataNr   = 0
	seccompDataArch = 4
	seccompDataArg0 = 16 // low 32 bits on little-endian
)

func bpfStmt(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }

func bpfJump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

func seccompFilter() []unix.SockFilter {
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
	)
	errno := func(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }
	return []unix.SockFilter{
		/* 0 */ bpfStmt(ld, seccompDataArch),
		/* 1 */ bpfJump(jeq, auditArch, 1, 0),
		/* 2 */ bpfStmt(ret, errno(unix.ENOSYS)), // foreign ABI
		/* 3 */ bpfStmt(ld, seccompDataNr),
		/* 4 */ bpfJump(jge, x32SyscallBit, 0, 1),
		/* 5 */ bpfStmt(ret, errno(unix.ENOSYS)), // x32 ABI
		/* 6 */ bpfJump(jeq, unix.SYS_IO_URING_SETUP, 0, 1),
		/* 7 */ bpfStmt(ret, errno(unix.ENOSYS)),
		/* 8 */ bpfJump(jeq, unix.SYS_SOCKET, 0, 3),
		/* 9 */ bpfStmt(ld, seccompDataArg0),
		/* 10 */ bpfJump(jeq, unix.AF_UNIX, 0, 1),
		/* 11 */ bpfStmt(ret, errno(unix.EAFNOSUPPORT)),
		/* 12 */ bpfStmt(ret, unix.SECCOMP_RET_ALLOW),
	}
}

// denyUnixSockets installs the filter on the calling thread.
func denyUnixSockets() error {
	f := seccompFilter()
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_SECCOMP): %w", err)
	}
	return nil
}
