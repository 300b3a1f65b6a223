package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/webhooks"
)

// TestNodeStatusWriteCondition: the node restriction on status writes (the
// ValidatingAdmissionPolicy in config/webhook/node_status_policy.yaml) allows a node to
// write the status of a command bound to it and refuses every other node identity. Each
// identity form webhooks.NodeIdentity knows writes the status of a command bound to node
// `bound`: the bound node and its node-agent tokens are allowed; another node, a node user
// outside the node group, an empty node name, and a token with no, two or another node are
// refused node-restricted.
func TestNodeStatusWriteCondition(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	bound := boundCommand(t, ns, "node-s1")
	const nodeNameExtra = "authentication.kubernetes.io/node-name"
	sa := func(name string) string { return "system:serviceaccount:workbench-system:" + name }
	cases := []struct {
		name   string
		user   string
		groups []string
		extra  map[string][]string
		allow  bool
	}{
		{name: "node user of the bound node", user: webhooks.NodeUserPrefix + bound, groups: []string{webhooks.NodeGroup}, allow: true},
		{name: "node user of another node", user: webhooks.NodeUserPrefix + "node-x", groups: []string{webhooks.NodeGroup}},
		{name: "node-prefixed user outside the node group", user: webhooks.NodeUserPrefix + bound},
		{name: "node group, empty node name", user: webhooks.NodeUserPrefix, groups: []string{webhooks.NodeGroup}},
		{name: "node-agent token of the bound node", user: sa("node-agent"), extra: map[string][]string{nodeNameExtra: {bound}}, allow: true},
		{name: "prefixed node-agent token of the bound node", user: sa("workbench-node-agent"), extra: map[string][]string{nodeNameExtra: {bound}}, allow: true},
		{name: "node-agent token of another node", user: sa("node-agent"), extra: map[string][]string{nodeNameExtra: {"node-x"}}},
		{name: "node-agent token with no node", user: sa("node-agent")},
		{name: "node-agent token with two nodes", user: sa("node-agent"), extra: map[string][]string{nodeNameExtra: {bound, bound}}},
		{name: "node-agent token of the bound node in the node group as another node", user: sa("node-agent"), groups: []string{webhooks.NodeGroup},
			extra: map[string][]string{nodeNameExtra: {"node-x"}}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A binding of this test's own (env.Bind's name would collide with other tests').
			crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("nodestatus-%s-%d", ns, i)},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: tc.user}},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "workbench-node-agent"}}
			must(t, env.Client.Create(ctx, crb))
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), crb) })
			cfg := rest.CopyConfig(env.Config)
			cfg.Impersonate = rest.ImpersonationConfig{UserName: tc.user, Groups: tc.groups, Extra: tc.extra}
			c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
			must(t, err)
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cmd := getCommand(t, ns, "c")
				cmd.Status.StartTime = &metav1.Time{Time: time.Now().Add(time.Duration(i) * time.Second)}
				return c.Status().Update(ctx, cmd)
			})
			if tc.allow {
				must(t, err)
				return
			}
			mustRefuse(t, err, "node-restricted")
		})
	}
}

// boundCommand places an environment in ns on a node whose capability is named after node
// (placedSetup), creates command "c" in it and waits until the command is admitted and bound
// to the environment's node, which it returns.
func boundCommand(t *testing.T, ns, node string) string {
	t.Helper()
	ctx := context.Background()
	placedSetup(t, ns, node)
	var e wbv1.Environment
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "e"}, &e))
	bound := e.Status.NodeName
	must(t, env.Client.Create(ctx, command(ns, "c", "/usr/bin/git", "--no-pager", "status")))
	eventually(t, 20*time.Second, "command bound to "+bound, func() (bool, string) {
		c := getCommand(t, ns, "c")
		return c.Labels[wbv1.NodeLabel] == bound && isTrue(c.Status.Conditions, wbv1.ConditionAdmitted), fmt.Sprint(c.Labels)
	})
	return bound
}
