//go:build !linux

package writecap

import "errors"

// Off Linux there is no size-capped tmpfs: Prepare refuses (sandbox-setup-failed).
func mountTmpfs(string, string) error { return errors.New("a size-capped tmpfs needs Linux") }

func unmountDetach(string) error { return errors.New("a size-capped tmpfs needs Linux") }
