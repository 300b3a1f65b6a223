//go:build !linux

package egress

import "sensorium.dev/workbench/internal/actuation"

// Off Linux there are no network namespaces: Attach refuses (a sandboxed process
// never runs without its egress filter).

func inNetns(pid int, _ func() error) error {
	return actuation.Refusef(actuation.CodeCapabilityMismatch, "egress: entering the network namespace of pid %d needs Linux", pid)
}

func loopbackUp() error {
	return actuation.Refusef(actuation.CodeCapabilityMismatch, "egress: network namespaces need Linux")
}
