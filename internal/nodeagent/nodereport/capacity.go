package nodereport

// Node-sized defaults for the caps a configuration leaves unset. The seed's laptop
// defaults (2 sessions, 4 reader tasks) make a third agent's session on a Kubernetes node
// fail with session-cap-reached; these scale with the node and stay bounded:
//
//	sessions               = clamp(min(8 × CPUs, 16 × memory GiB), 16, 256)
//	sessionsPerEnvironment = max(8, sessions / 4)
//	readerTasks            = 2 × sessions (one PTY reader and one waiter per session)
//	concurrentCommands     = clamp(2 × CPUs, 8, 64)
//
// (The agent's configuration fills its unset caps from these: agent.NodeSizedCaps.)
// A 2-CPU 24 GiB machine gets 16 sessions, 8 per environment, 32 reader tasks and 8
// concurrent commands. Reaching a cap still refuses with its code; nothing queues.
const (
	minNodeSessions     = 16
	maxNodeSessions     = 256
	minPerEnvSessions   = 8
	minNodeCommands     = 8
	maxNodeCommands     = 64
	sessionsPerCPU      = 8
	sessionsPerGiB      = 16
	commandsPerCPU      = 2
	readerTasksPerSlots = 2
)

// NodeSized returns the default caps for a node with cpus CPUs and memBytes of memory.
func NodeSized(cpus int, memBytes uint64) Caps {
	cpus = max(cpus, 1)
	gib := int(memBytes >> 30)
	sessions := min(sessionsPerCPU*cpus, sessionsPerGiB*max(gib, 1))
	sessions = min(max(sessions, minNodeSessions), maxNodeSessions)
	return Caps{
		Sessions:               sessions,
		SessionsPerEnvironment: max(minPerEnvSessions, sessions/4),
		ReaderTasks:            readerTasksPerSlots * sessions,
		ConcurrentCommands:     min(max(commandsPerCPU*cpus, minNodeCommands), maxNodeCommands),
	}
}
