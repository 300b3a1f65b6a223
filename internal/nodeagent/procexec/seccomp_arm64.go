package procexec

import "golang.org/x/sys/unix"

// auditArch is the seccomp_data.arch value of native syscalls.
const auditArch = unix.AUDIT_ARCH_AARCH64

// x32SyscallBit has no meaning on arm64; no syscall number reaches it.
const x32SyscallBit = 0x40000000
