// Package nodeagenttest starts a real node agent in the test process against an envtest
// control plane, acting as the node identity workbench:node:<name> bound to the
// workbench-node-agent ClusterRole, as a DaemonSet pod would. Suite (Main, StartSuite) is
// the one bootstrap of every envtest suite that runs the manager and a node agent.
package nodeagenttest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"

	"sensorium.dev/workbench/internal/backends/fixturecopy"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/platform/cgroups"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/webhooks"
)

// NodeConfig binds the workbench-node-agent ClusterRole to the node identity of node and
// returns a rest config impersonating it (user workbench:node:<node>, the nodes group).
func NodeConfig(ctx context.Context, env *envtest.Env, node string) (*rest.Config, error) {
	user := webhooks.NodeUserPrefix + node
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "node-agent-" + node},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "workbench-node-agent"}}
	if err := env.Client.Create(ctx, crb); err != nil && !strings.Contains(err.Error(), "already exists") {
		return nil, fmt.Errorf("binding the node agent role for %s: %w", node, err)
	}
	if err := env.WaitAuthorized(ctx, user, ""); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{webhooks.NodeGroup}}
	return cfg, nil
}

// Start creates an agent with cfg (cfg.NodeName names the node) and runs it until ctx ends.
// The caller releases its cgroups when it is gone for good (Release); Suite.StartAgent does.
func Start(ctx context.Context, env *envtest.Env, cfg agent.Config, opts agent.Options) (*agent.Agent, error) {
	a, _, err := start(ctx, env, cfg, opts)
	return a, err
}

// StartWithDone is Start, with a channel closed when the agent's Run returned (so the
// caller can wait for it before Release).
func StartWithDone(ctx context.Context, env *envtest.Env, cfg agent.Config, opts agent.Options) (*agent.Agent, <-chan struct{}, error) {
	return start(ctx, env, cfg, opts)
}

// start is Start, with a channel closed when the agent's Run returned.
func start(ctx context.Context, env *envtest.Env, cfg agent.Config, opts agent.Options) (*agent.Agent, <-chan struct{}, error) {
	rc, err := NodeConfig(ctx, env, cfg.NodeName)
	if err != nil {
		return nil, nil, err
	}
	a, err := agent.New(cfg, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the agent of node %s: %w", cfg.NodeName, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.Run(ctrl.LoggerInto(ctx, ctrl.Log.WithName("agent")), rc); err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "the agent of node %s stopped: %v\n", cfg.NodeName, err)
		}
	}()
	return a, done, nil
}

// TokenFor creates ServiceAccount name in ns bound to the ClusterRole role there, waits
// until the binding is in effect and returns a short-lived token for it (for the node's
// data plane, which authenticates with TokenReview).
func TokenFor(ctx context.Context, env *envtest.Env, ns, name, role string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if err := env.Client.Create(ctx, sa); err != nil {
		return "", err
	}
	if err := env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}); err != nil {
		return "", err
	}
	if err := env.WaitAuthorized(ctx, "system:serviceaccount:"+ns+":"+name, ns); err != nil {
		return "", err
	}
	exp := int64(600)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp, Audiences: []string{agent.DataPlaneAudience()}}}
	if err := env.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// WaitDataPlane waits at most within until node's agent has published its data-plane
// endpoint on its WorkbenchNode, and returns that WorkbenchNode.
func WaitDataPlane(ctx context.Context, env *envtest.Env, node string, within time.Duration) (*wbv1.WorkbenchNode, error) {
	var wn wbv1.WorkbenchNode
	deadline := time.Now().Add(within)
	for {
		err := env.Client.Get(ctx, client.ObjectKey{Name: node}, &wn)
		if err == nil && wn.Status.DataPlane != nil && wn.Status.DataPlane.Endpoint != "" {
			return &wn, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no data plane endpoint on WorkbenchNode %s after %s (last error %v)", node, within, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the data plane of WorkbenchNode %s: %w", node, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// DataPlane returns the node's published data-plane endpoint and an HTTPS client trusting
// its published CA, once the agent has published them on its WorkbenchNode.
func DataPlane(ctx context.Context, env *envtest.Env, node string) (string, *http.Client, error) {
	wn, err := WaitDataPlane(ctx, env, node, 30*time.Second)
	if err != nil {
		return "", nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(wn.Status.DataPlane.CABundle)) {
		return "", nil, fmt.Errorf("WorkbenchNode %s publishes no CA certificate", node)
	}
	return wn.Status.DataPlane.Endpoint, &http.Client{Timeout: 40 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

// Release kills every process an agent with cfg left in its cgroups and removes them: VMs
// outlive their agent by design (a restarted agent adopts them), so a suite whose agent is
// gone for good releases them itself, or they would run on after the test binary exits.
func Release(cfg agent.Config) error {
	// The agent keeps its environments' disks (mounted loop devices) across restarts; one
	// gone for good leaves none behind (and its state dir can then be removed).
	var diskErrs []error
	for _, a := range fixturecopy.ReleaseDisks(cfg.StateDir) {
		if !a.Removed {
			diskErrs = append(diskErrs, fmt.Errorf("releasing %s of node %s: %s", a.Resource, cfg.NodeName, a.Message))
		}
	}
	if err := errors.Join(diskErrs...); err != nil {
		return err
	}
	m, err := cgroups.NewManager(cgroups.Config{Parent: agent.CgroupParent(cfg)})
	if err != nil {
		return fmt.Errorf("releasing the cgroups of node %s: %w", cfg.NodeName, err)
	}
	_, err = m.Sweep(nil)
	m.RemoveParent()
	if err != nil {
		return fmt.Errorf("releasing the cgroups of node %s: %w", cfg.NodeName, err)
	}
	return nil
}
