package integration

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/webhooks"
)

// can asks the API server, as the impersonated user, whether it may do verb on resource.
func can(t *testing.T, c client.Client, ns, verb, resource, sub string) bool {
	t.Helper()
	r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: wbv1.GroupVersion.Group, Resource: resource, Subresource: sub},
	}}
	must(t, c.Create(context.Background(), r))
	return r.Status.Allowed
}

// TestRoles impersonates the agent, viewer and operator identities.
func TestRoles(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	for _, u := range []struct{ role, user string }{{"workbench-agent", "ag"}, {"workbench-viewer", "vi"}, {"workbench-operator", "op"}} {
		must(t, env.Bind(ctx, u.role, u.user, ns))
	}
	agent, _ := env.As("ag")
	viewer, _ := env.As("vi")
	op, _ := env.As("op")
	type check struct {
		verb, resource, sub string
		agent, viewer, op   bool
	}
	for _, c := range []check{
		{"create", "terminalcommands", "", true, false, true},
		{"create", "waits", "", true, false, true},
		{"create", "probes", "", true, false, true},
		{"create", "filepatches", "", true, false, true},
		{"update", "filepatches", "", false, false, true},
		{"create", "consentgrants", "", false, false, true},
		{"approve", "consentrequests", "", false, false, true},
		{"approve", "filepatches", "", false, false, true},
		{"create", "terminalsessions", "input", false, false, true},
		{"create", "terminalsessions", "resize", false, false, true},
		{"create", "terminalsessions", "signal", false, false, true},
		{"get", "terminalsessions", "screen", true, true, true},
		{"get", "terminalsessions", "events", true, true, true},
		{"list", "terminalcommands", "", true, true, true},
		{"create", "commandprofiles", "", false, false, true},
		{"create", "environments", "", false, false, true},
		{"list", "actionruns", "", true, true, true},
		{"create", "actionruns", "", true, false, true},
		{"list", "actioncatalogs", "", true, true, true},
		{"create", "actioncatalogs", "", false, false, true},
	} {
		for _, who := range []struct {
			name string
			c    client.Client
			want bool
		}{{"agent", agent, c.agent}, {"viewer", viewer, c.viewer}, {"operator", op, c.op}} {
			if got := can(t, who.c, ns, c.verb, c.resource, c.sub); got != who.want {
				t.Errorf("%s %s %s/%s: allowed=%v, want %v", who.name, c.verb, c.resource, c.sub, got, who.want)
			}
		}
	}
	// Through the API server, not only by review: the agent proposes a command but cannot
	// approve its own consent.
	must(t, agent.Create(ctx, command(ns, "from-agent", "/usr/bin/git", "--no-pager", "status")))
	if err := agent.Create(ctx, grant(ns, "self", "from-agent-consent", wbv1.ConsentAllowOnce)); !apierrors.IsForbidden(err) {
		t.Fatalf("agent created a grant: %v", err)
	}
	if err := viewer.Create(ctx, command(ns, "from-viewer", "/usr/bin/git", "--no-pager", "status")); !apierrors.IsForbidden(err) {
		t.Fatalf("viewer created a command: %v", err)
	}
}

// TestNodeRestriction: a node identity writes only the status of objects bound to its node,
// and only its own BackendCapability and WorkbenchNode.
func TestNodeRestriction(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	bound := boundCommand(t, ns, "node-r1") // the first capability by name, whichever test created it
	must(t, env.Bind(ctx, "workbench-node-agent", webhooks.NodeUserPrefix+bound, ""))
	must(t, env.Bind(ctx, "workbench-node-agent", webhooks.NodeUserPrefix+"node-other", ""))
	n1, _ := env.As(webhooks.NodeUserPrefix+bound, webhooks.NodeGroup)
	n2, _ := env.As(webhooks.NodeUserPrefix+"node-other", webhooks.NodeGroup)

	startRunning := func(c client.Client) error {
		// Retry a stale resource version: the refusal (or success) is what is asserted.
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cmd := getCommand(t, ns, "c")
			cmd.Status.StartTime = &metav1.Time{Time: time.Now()}
			cmd.Status.NodeName = bound
			return c.Status().Update(ctx, cmd)
		})
	}
	mustRefuse(t, startRunning(n2), "node-restricted")
	must(t, startRunning(n1))
	// The API server enforces the status half itself (the ValidatingAdmissionPolicy in
	// config/webhook/node_status_policy.yaml; no webhook is called for these writes), for
	// every kind a node writes the status of: an Environment too. (Every identity form
	// against a command: TestNodeStatusWriteCondition.)
	envStatus := func(c client.Client) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var cur wbv1.Environment
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "e"}, &cur); err != nil {
				return err
			}
			return c.Status().Update(ctx, &cur)
		})
	}
	mustRefuse(t, envStatus(n2), "node-restricted")
	must(t, envStatus(n1))
	cmd := getCommand(t, ns, "c")
	cmd.Spec.TimeoutSeconds = 5
	// Spec writes: RBAC already refuses them; the webhook would too (node-restricted).
	if err := n1.Update(ctx, cmd); !apierrors.IsForbidden(err) {
		t.Fatalf("node updated a command's spec: %v", err)
	}
	if err := n1.Create(ctx, command(ns, "by-node", "/usr/bin/git", "--no-pager", "status")); !apierrors.IsForbidden(err) {
		t.Fatalf("node created a command: %v", err)
	}

	mustRefuse(t, n1.Create(ctx, hostLocalCapability("node-other")), "node-restricted")
	own := hostLocalCapability(bound)
	own.Name = bound + ".fixture-copy"
	own.Spec.BackendID = wbv1.BackendFixtureCopy
	must(t, n1.Create(ctx, own))
	mustRefuse(t, n1.Create(ctx, &wbv1.WorkbenchNode{ObjectMeta: metav1.ObjectMeta{Name: "node-other"}}), "node-restricted")
	must(t, n1.Create(ctx, &wbv1.WorkbenchNode{ObjectMeta: metav1.ObjectMeta{Name: bound}}))
	if err := n1.Create(ctx, grant(ns, "node-grant", "c-consent", wbv1.ConsentAllowOnce)); !apierrors.IsForbidden(err) {
		t.Fatalf("node created a grant: %v", err)
	}
}

// TestPlacement: conjunctive matching; no match lists the unmet properties.
func TestPlacement(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	must(t, env.Client.Create(ctx, hostLocalCapability("node-p")))
	e := environment(ns, "needs-vm")
	hw := wbv1.IsolationClass("hardware-vm")
	e.Spec.Requirements = &wbv1.EnvironmentRequirements{IsolationClass: &hw}
	must(t, env.Client.Create(ctx, e))
	eventually(t, 20*time.Second, "needs-vm not scheduled with unmet isolationClass", func() (bool, string) {
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(e), e))
		for _, c := range e.Status.Conditions {
			if c.Type == wbv1.ConditionScheduled && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "isolationClass") {
				return len(e.Status.Unmet) > 0 && e.Status.NodeName == "", c.Message
			}
		}
		return false, fmt.Sprintf("%+v", e.Status)
	})
	ok := environment(ns, "plain")
	none := wbv1.IsolationClass("none")
	ok.Spec.Requirements = &wbv1.EnvironmentRequirements{IsolationClass: &none}
	must(t, env.Client.Create(ctx, ok))
	eventually(t, 20*time.Second, "plain scheduled with a plan digest", func() (bool, string) {
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(ok), ok))
		return ok.Status.NodeName != "" && ok.Labels[wbv1.NodeLabel] == ok.Status.NodeName && strings.HasPrefix(string(ok.Status.PlanDigest), "sha256:") &&
			ok.Status.Phase == wbv1.EnvironmentAllocating, fmt.Sprintf("%+v %v", ok.Status, ok.Labels)
	})
}

// TestSamplesAdmitted applies every sample in config/samples by server-side apply.
func TestSamplesAdmitted(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(env.Root, "config", "samples")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	must(t, err)
	vmFiles, err := filepath.Glob(filepath.Join(dir, "vm", "*.yaml")) // applied by run-local when VMs are on
	must(t, err)
	files = append(files, vmFiles...)
	poolFiles, err := filepath.Glob(filepath.Join(dir, "pool", "0*.yaml")) // the warm pool sample (docs/pools.md)
	must(t, err)
	files = append(files, poolFiles...)
	sort.Strings(files)
	if len(files) == 0 {
		t.Fatal("no samples in config/samples")
	}
	n, wantDocs := 0, 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		must(t, err)
		// Every document separator counts: a document that fails to decode fails the test
		// instead of ending the file early, and the number of objects applied must equal
		// the number of non-empty documents in the files.
		docs := 0
		for _, d := range strings.Split("\n"+string(raw), "\n---") {
			if strings.TrimSpace(stripComments(d)) != "" {
				docs++
			}
		}
		wantDocs += docs
		dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(raw)), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if err != io.EOF {
					t.Fatalf("%s: decoding document %d: %v", filepath.Base(f), n+1, err)
				}
				break
			}
			if len(u.Object) == 0 {
				continue
			}
			//nolint:staticcheck // server-side apply of unstructured samples, as kubectl apply --server-side does.
			if err := env.Client.Patch(ctx, u, client.Apply, client.FieldOwner("samples-test"), client.ForceOwnership); err != nil {
				t.Errorf("%s: %s %s refused: %v", filepath.Base(f), u.GetKind(), u.GetName(), err)
			}
			n++
		}
	}
	if n != wantDocs || n < 11 {
		t.Fatalf("applied %d sample objects from %d non-empty documents in %d files (want all of them, and at least 11)", n, wantDocs, len(files))
	}
}

// stripComments drops YAML comment lines (a document holding only comments is empty).
func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
