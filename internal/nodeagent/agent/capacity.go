package agent

import (
	"runtime"

	"sensorium.dev/workbench/internal/nodeagent/nodereport"
)

// NodeSizedCaps returns the default caps for a node with cpus CPUs and memBytes of memory:
// sessions, sessions per environment, reader tasks and concurrent commands sized by the
// node report's formula (nodereport.NodeSized, capacity.go there); the rest stay unset.
func NodeSizedCaps(cpus int, memBytes uint64) Caps {
	n := nodereport.NodeSized(cpus, memBytes)
	return Caps{Sessions: n.Sessions, SessionsPerEnvironment: n.SessionsPerEnvironment, ReaderTasks: n.ReaderTasks,
		ConcurrentCommands: n.ConcurrentCommands}
}

// hostCaps is NodeSizedCaps for this machine (runtime.NumCPU honours the CPU affinity
// mask, so a cpuset-limited agent sizes to its share).
func hostCaps() Caps {
	return NodeSizedCaps(runtime.NumCPU(), hostMemBytes())
}
