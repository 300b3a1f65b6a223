//go:build !workbench_unix_transport

package main

import "net"

// Production builds have no transport but AF_VSOCK.
func listenOverride() (net.Listener, bool, error) { return nil, false, nil }
