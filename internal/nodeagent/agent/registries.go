package agent

// The agent's in-process state is split by responsibility, each part behind its own lock
// and a narrow set of methods (issue 16 item 10):
//
//   - environments.Registry: the environments allocated in this process and their pinned
//     host roots (the environments room);
//   - sessions.Registry: the sessions this process serves (their rings and PTY programs;
//     the sessions room);
//   - Agent.mu: the command table and what hangs off it (running handles and finished
//     results, the data plane's change signal and uploads, the recovery report, the
//     pending-wait count).
//
// No method of one registry calls into another while holding its lock, so the locks are
// never nested and need no order.
