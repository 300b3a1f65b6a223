//go:build !amd64 && !arm64

package procexec

import "errors"

// denyUnixSockets has no filter for this architecture: fail closed.
func denyUnixSockets() error {
	return errors.New("no UNIX-socket seccomp filter for this architecture")
}
