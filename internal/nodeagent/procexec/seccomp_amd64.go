package procexec

import "golang.org/x/sys/unix"

// auditArch is the seccomp_data.arch value of native syscalls.
const auditArch = unix.AUDIT_ARCH_X86_64

// x32SyscallBit marks x32-ABI syscall numbers on amd64; they are denied.
const x32SyscallBit = 0x40000000
