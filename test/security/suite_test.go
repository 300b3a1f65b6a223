// Package security attacks the node's sandbox the way a hostile repository would: through
// the real API server and a running node agent (as root, as CI runs), it places a static
// probe program and a Makefile in a workspace and has the agent run `make` — repository
// code run by a build tool — as a TerminalCommand and as a PTY program, on host-local and
// on fixture-copy.v1. Every privileged operation the probe attempts must be refused.
//
// The same probe binary is first run unsandboxed by the test itself (calibration): a probe
// that is not "allowed" there cannot show anything on this kernel and is reported as
// inconclusive instead of being counted as a pass.
package security

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"

	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
)

const nodeName = "node-sec"

var (
	env        *envtest.Env
	ag         *agent.Agent
	tmp        string
	workspace  string // admitted root "work"
	stateDir   string // the agent's state directory
	kubeconfig string // the agent's kubeconfig (a real credential of its node identity)
	probeBin   string // the static probe, built once
	hostSock   string // an AF_UNIX listener in the host's namespaces
	tcpAddrs   string // TCP listeners in the host network namespace (loopback and eth)

	tcpAccepted  atomic.Int64 // connections accepted by the host TCP listener
	unixAccepted atomic.Int64 // connections accepted by the host AF_UNIX listener
)

func TestMain(m *testing.M) {
	nodeagenttest.Main(m, nodeagenttest.Options{Name: "security", Setup: setup})
}

func setup(s *nodeagenttest.Suite) error {
	env, tmp, workspace, stateDir = s.Env, s.Dir, s.Workspace, s.StateDir
	for _, d := range []string{filepath.Join(tmp, "bin"), filepath.Join(tmp, "agent")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	probeBin = filepath.Join(tmp, "bin", "probe")
	build := exec.Command("go", "build", "-trimpath", "-o", probeBin, "./probe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the probe: %w\n%s", err, out)
	}
	var err error
	if kubeconfig, err = nodeagenttest.NodeKubeconfig(env, nodeName, filepath.Join(tmp, "agent")); err != nil {
		return err
	}
	stop, err := listen()
	if err != nil {
		return err
	}
	s.Defer(stop)
	cfg := s.AgentConfig(nodeName)
	cfg.Caps = agent.Caps{Sessions: 64, SessionsPerEnvironment: 8}
	cfg.QEMU, qemuSkip = nodeagenttest.QEMU()
	ag, err = s.StartAgent(cfg, agent.Options{})
	return err
}

// listen opens the host-side listeners the probe tries to reach: TCP on every address of
// the host network namespace (the probe dials loopback and the first global address) and
// an AF_UNIX socket outside any workspace. They count what they accept.
func listen() (func(), error) {
	tl, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		return nil, err
	}
	port := tl.Addr().(*net.TCPAddr).Port
	tcpAddrs = fmt.Sprintf("127.0.0.1:%d", port)
	if ip := globalIPv4(); ip != "" {
		tcpAddrs += fmt.Sprintf(",%s:%d", ip, port)
	}
	hostSock = filepath.Join(tmp, "agent", "host.sock")
	ul, err := net.Listen("unix", hostSock)
	if err != nil {
		_ = tl.Close()
		return nil, err
	}
	accept := func(l net.Listener, n *atomic.Int64) {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			_ = c.Close()
		}
	}
	go accept(tl, &tcpAccepted)
	go accept(ul, &unixAccepted)
	return func() { _ = tl.Close(); _ = ul.Close() }, nil
}

func globalIPv4() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}
