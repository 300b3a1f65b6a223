//go:build workbench_unix_transport

package main

import (
	"flag"
	"fmt"
	"net"
)

// The Unix-socket transport exists only in the conformance build.
var unixSocket = flag.String("unix-socket", "", "conformance build only: serve on this Unix socket instead of AF_VSOCK (no CID check)")

func listenOverride() (net.Listener, bool, error) {
	if *unixSocket == "" {
		return nil, false, nil
	}
	l, err := net.Listen("unix", *unixSocket)
	if err != nil {
		return nil, false, fmt.Errorf("unix transport: %w", err)
	}
	return l, true, nil
}
