// Package fsaccess gives the node agent bounded, kernel-enforced access beneath
// one admitted directory (a Root). Every path is checked lexically first and then
// resolved by openat2(2) with RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS relative to a
// directory fd opened once, so `..`, absolute symlinks and symlinks that leave the
// root are refused by the kernel, not by string comparison. There is no fallback:
// on a kernel without openat2 every operation refuses with CodeOpenat2Unavailable.
//
// On darwin (the Mac node of vfkit-system.v1; root_darwin.go) there is no openat2:
// every resolution is one openat(2) relative to the directory fd with O_NOFOLLOW_ANY,
// so the kernel refuses a symbolic link in any component (CodeSymlinkEscape) — stricter
// than Linux, where a link that stays beneath the root is followed — and a path with a
// ".." component or an absolute one is refused before the kernel sees it. The Linux
// mechanism is in root_linux.go.
//
// The package has no Kubernetes imports; it is pure mechanics.
package fsaccess
