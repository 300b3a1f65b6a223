// Package fsaccess gives the node agent bounded, kernel-enforced access beneath
// one admitted directory (a Root). Every path is checked lexically first and then
// resolved by openat2(2) with RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS relative to a
// directory fd opened once, so `..`, absolute symlinks and symlinks that leave the
// root are refused by the kernel, not by string comparison. There is no fallback:
// on a kernel without openat2 every operation refuses with CodeOpenat2Unavailable.
//
// The package has no Kubernetes imports; it is pure mechanics.
package fsaccess
