// Package stack starts what an end-to-end test of the client surface needs: a real API
// server with the manager's controllers and webhooks (internal/test/envtest), the
// aggregated API (workbench-apiserver, internal/test/aggtest) registered with it, one node
// agent acting as its node identity with real sandboxed processes, the binaries under test
// built with `go build`, and a kubeconfig for them. Callers' TestMain must call
// procexec.MaybeRunHelper and guestenv.MaybeRunRelay first (the agent re-executes the test
// binary as its sandbox helper and as the guest PTY relay).
package stack

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/test/aggtest"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
)

// NodeName is the node the stack's agent serves.
const NodeName = "node-cli"

// Stack is a running control plane, manager, node agent and built binaries.
type Stack struct {
	Env *envtest.Env
	// Aggregated is workbench-apiserver registered with the API server (nil when this
	// machine has no non-loopback IPv4 address for its EndpointSlice).
	Aggregated *aggtest.Server
	Workspace  string // the agent's admitted root "work"
	BinDir     string // kubectl-workbench, workbench-mcp
	Kubeconfig string // admin credentials of the test API server
	suite      *nodeagenttest.Suite
}

// ErrSkip explains why the stack cannot start here; callers skip with it.
type ErrSkip struct{ Reason string }

func (e *ErrSkip) Error() string { return e.Reason }

// StartForMain is Start for a TestMain: when the stack cannot start here it says why
// ("SKIP <suite>: ...") and exits 0; on any other error it exits 1.
func StartForMain(suite string, binaries ...string) *Stack {
	st, err := Start(binaries...)
	var skip *ErrSkip
	if errors.As(err, &skip) {
		fmt.Fprintln(os.Stderr, "SKIP "+suite+":", skip.Reason)
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the stack:", err)
		os.Exit(1)
	}
	return st
}

// Start boots the stack (nodeagenttest's suite bootstrap) and builds binaries (package paths
// relative to the module root).
func Start(binaries ...string) (*Stack, error) {
	if os.Geteuid() != 0 {
		return nil, &ErrSkip{"needs root: the node agent runs commands in network namespaces with Landlock"}
	}
	// The aggregated API (workbench-apiserver, in-process) needs a non-loopback address for
	// its EndpointSlice; without one the stack runs without it and says so.
	_, noAgg := aggtest.HostIP()
	if noAgg != nil {
		fmt.Fprintln(os.Stderr, "stack: running without the aggregated API:", noAgg)
	}
	s := &Stack{}
	suite, err := nodeagenttest.StartSuite(nodeagenttest.Options{Name: "cli", Env: envtest.Options{Aggregation: noAgg == nil},
		Setup: func(su *nodeagenttest.Suite) error {
			s.Env, s.Workspace, s.BinDir = su.Env, su.Workspace, filepath.Join(su.Dir, "bin")
			if err := os.MkdirAll(s.BinDir, 0o755); err != nil {
				return err
			}
			if err := s.build(binaries); err != nil {
				return err
			}
			var err error
			if s.Kubeconfig, err = writeKubeconfig(su.Env.Config, filepath.Join(su.Dir, "kubeconfig")); err != nil {
				return err
			}
			if noAgg == nil {
				// The node's VM backend where the guest image exists.
				if s.Aggregated, err = aggtest.StartWithAgent(su, NodeName, func(c *agent.Config) { c.QEMU, QEMUSkip = nodeagenttest.QEMU("imagemanifest.yaml") }); err != nil {
					return err
				}
			} else {
				cfg := su.AgentConfig(NodeName)
				cfg.Caps = agent.Caps{Sessions: 64, SessionsPerEnvironment: 8}
				if _, err := su.StartAgent(cfg, agent.Options{}); err != nil {
					return err
				}
			}
			// The aggregated API forwards to the data-plane address the agent publishes.
			_, err = nodeagenttest.WaitDataPlane(su.Ctx, su.Env, NodeName, time.Minute)
			return err
		}})
	var skip *nodeagenttest.SkipError
	if errors.As(err, &skip) {
		return nil, &ErrSkip{skip.Reason}
	}
	if err != nil {
		return nil, err
	}
	s.suite = suite
	return s, nil
}

// Stop ends the agent (releasing what it left in its cgroups), the aggregated API, the
// manager and the control plane, and removes the temp dir.
func (s *Stack) Stop() {
	if s.suite != nil {
		s.suite.Stop()
	}
}

// Bin is the path of a built binary.
func (s *Stack) Bin(name string) string { return filepath.Join(s.BinDir, name) }

func (s *Stack) build(pkgs []string) error {
	if len(pkgs) == 0 {
		return nil
	}
	args := append([]string{"build", "-o", s.BinDir + "/"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = s.Env.Root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, out)
	}
	return nil
}

// writeKubeconfig writes cfg's address and client certificate as a kubeconfig.
func writeKubeconfig(cfg *rest.Config, path string) (string, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", fmt.Errorf("writing kubeconfig: %w", err)
	}
	return path, nil
}

// QEMUSkip says why the stack's agent does not run qemu-microvm.v1 ("" when it does: the
// guest image of `make guest-image` is in bin/guest and QEMU is installed).
var QEMUSkip = "the stack was not started with the aggregated API"
