// Package stack starts what an end-to-end test of the client surface needs: a real API
// server with the manager's controllers and webhooks (internal/test/envtest), the
// aggregated API (workbench-apiserver, internal/test/aggtest) registered with it, one node
// agent acting as its node identity with real sandboxed processes, the binaries under test
// built with `go build`, and a kubeconfig for them. Callers' TestMain must call
// procexec.MaybeRunHelper first (the agent re-executes the test binary as its sandbox
// helper).
package stack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/controllers"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/test/aggtest"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
	"sensorium.dev/workbench/webhooks"
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
	tmp        string
	cancel     context.CancelFunc
}

// ErrSkip explains why the stack cannot start here; callers skip with it.
type ErrSkip struct{ Reason string }

func (e *ErrSkip) Error() string { return e.Reason }

// Start boots the stack and builds binaries (package paths relative to the module root).
func Start(binaries ...string) (*Stack, error) {
	if os.Geteuid() != 0 {
		return nil, &ErrSkip{"needs root: the node agent runs commands in network namespaces with Landlock"}
	}
	// The aggregated API (workbench-apiserver, in-process) needs a non-loopback address for
	// its EndpointSlice; without one the stack runs without it and says so.
	_, noAgg := aggtest.HostIP()
	env, err := envtest.Start(envtest.Options{Aggregation: noAgg == nil, Setup: func(mgr ctrl.Manager) error {
		if err := controllers.SetupWithManager(mgr, controllers.Config{}); err != nil {
			return err
		}
		return webhooks.SetupWithManager(mgr)
	}})
	if err == envtest.ErrNoAssets {
		return nil, &ErrSkip{err.Error()}
	}
	if err != nil {
		return nil, err
	}
	s := &Stack{Env: env}
	if noAgg != nil {
		fmt.Fprintln(os.Stderr, "stack: running without the aggregated API:", noAgg)
	}
	ok := false
	defer func() {
		if !ok {
			s.Stop()
		}
	}()
	if s.tmp, err = os.MkdirTemp("", "wb-cli-"); err != nil {
		return nil, err
	}
	s.Workspace, s.BinDir = filepath.Join(s.tmp, "work"), filepath.Join(s.tmp, "bin")
	for _, d := range []string{s.Workspace, s.BinDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := s.build(binaries); err != nil {
		return nil, err
	}
	if s.Kubeconfig, err = writeKubeconfig(env.Config, filepath.Join(s.tmp, "kubeconfig")); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if noAgg == nil {
		if s.Aggregated, err = aggtest.Start(ctx, env); err != nil {
			return nil, fmt.Errorf("starting workbench-apiserver: %w", err)
		}
		if err := s.Aggregated.StartNodeAgent(ctx, env, NodeName, filepath.Join(s.tmp, "state"), s.Workspace, s.qemu); err != nil {
			return nil, err
		}
	} else if err := s.startAgent(ctx); err != nil {
		return nil, err
	}
	if err := s.waitNode(ctx); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// Stop ends the agent, the manager and the control plane and removes the temp dir.
func (s *Stack) Stop() {
	if s.cancel != nil {
		s.cancel()
	}
	if s.tmp != "" {
		// VMs outlive their agent by design; this stack's agent is gone for good.
		if err := nodeagenttest.Release(agent.Config{NodeName: NodeName, StateDir: filepath.Join(s.tmp, "state")}); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	if s.Aggregated != nil {
		s.Aggregated.Stop()
	}
	if s.Env != nil {
		s.Env.Stop()
	}
	if s.tmp != "" {
		_ = os.RemoveAll(s.tmp)
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

func (s *Stack) startAgent(ctx context.Context) error {
	user := webhooks.NodeUserPrefix + NodeName
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "node-agent-" + NodeName},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "workbench-node-agent"}}
	if err := s.Env.Client.Create(ctx, crb); err != nil {
		return err
	}
	if err := s.Env.WaitAuthorized(ctx, user, ""); err != nil {
		return err
	}
	cfg := rest.CopyConfig(s.Env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{webhooks.NodeGroup}}
	a, err := agent.New(agent.Config{NodeName: NodeName, StateDir: filepath.Join(s.tmp, "state"), AdmittedRoots: map[string]string{"work": s.Workspace},
		HeartbeatSeconds: 5, DataPlaneAddress: "127.0.0.1:0", Caps: agent.Caps{Sessions: 64, SessionsPerEnvironment: 8}}, agent.Options{})
	if err != nil {
		return err
	}
	go func() {
		if err := a.Run(ctrl.LoggerInto(ctx, ctrl.Log.WithName("agent")), cfg); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "agent stopped:", err)
		}
	}()
	return nil
}

// waitNode waits (at most a minute) until the agent has published its WorkbenchNode with a
// data-plane endpoint: the aggregated API forwards to that address.
func (s *Stack) waitNode(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var n wbv1.WorkbenchNode
		err := s.Env.Client.Get(ctx, ctrlclient.ObjectKey{Name: NodeName}, &n)
		if err == nil && n.Status.DataPlane != nil && n.Status.DataPlane.Endpoint != "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("WorkbenchNode %s has no data-plane endpoint after a minute (last error: %v)", NodeName, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// QEMUSkip says why the stack's agent does not run qemu-microvm.v1 ("" when it does: the
// guest image of `make guest-image` is in bin/guest and QEMU is installed).
var QEMUSkip = "the stack was not started with the aggregated API"

// qemu enables qemu-microvm.v1 (TCG) in the agent when the guest image and QEMU exist.
func (s *Stack) qemu(c *agent.Config) {
	bin := filepath.Join(envtest.RepoRoot(), "bin")
	for _, f := range []string{"vmlinux", "initramfs.cpio", "vhost-device-vsock", "imagemanifest.yaml"} {
		if _, err := os.Stat(filepath.Join(bin, "guest", f)); err != nil {
			QEMUSkip = fmt.Sprintf("bin/guest/%s missing: run `make guest-image` first (%v)", f, err)
			return
		}
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		QEMUSkip = fmt.Sprintf("qemu-system-x86_64 not found (installed by `make guest-image`): %v", err)
		return
	}
	if runtime.GOARCH != "amd64" {
		QEMUSkip = "the guest image is x86_64"
		return
	}
	QEMUSkip = ""
	c.QEMU = &agent.QEMUConfig{Enabled: true, ImageDir: bin, Accel: "tcg"}
}
