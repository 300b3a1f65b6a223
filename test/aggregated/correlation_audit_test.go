package aggregated

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/webhooks"
)

// TestCorrelationInAudit: the correlation id is in kube-apiserver's audit log (issue 30 item
// 5). The audit event of a TerminalCommand's create carries the id the mutating webhook
// gave it (annotation mterminalcommand.workbench.sensorium.dev/correlation-id), equal to the
// command's label; a supplied id is recorded as supplied; a Wait created with an id carries
// it from the validating webhook; an Artifact a client creates for the command carries the
// command's id from both of its webhooks.
func TestCorrelationInAudit(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s"}})
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/echo", func(s *wbv1.CommandProfileSpec) { s.AllowedArgPrefixes = []string{"hello"} })))
	cmd := func(name string, labels map[string]string) *wbv1.TerminalCommand {
		c := &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "p", Argv: []string{"/bin/echo", "hello"}, Cwd: wbv1.CwdAddress{Root: "repo"}, TimeoutSeconds: 20}}
		must(t, env.Client.Create(ctx, c))
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c))
		return c
	}
	generated := cmd("gen", nil)
	id := generated.Labels[wbv1.CorrelationLabel]
	if !strings.HasPrefix(id, "wb-") {
		t.Fatalf("the command was given no correlation id: %v", generated.Labels)
	}
	const supplied = "audit-supplied-001"
	cmd("sup", map[string]string{wbv1.CorrelationLabel: supplied})
	must(t, env.Client.Create(ctx, &wbv1.Wait{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns, Labels: map[string]string{wbv1.CorrelationLabel: supplied}},
		Spec: wbv1.WaitSpec{Scope: &wbv1.Scope{CommandRef: ptr(wbv1.ObjectName("sup"))}, Condition: wbv1.WaitCondition{Kind: wbv1.ConditionKindCommandDone}, DeadlineSeconds: 30}}))
	owned := artifact(ns, "a", exportSpec(""))
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: wbv1.GroupVersion.String(), Kind: "TerminalCommand", Name: "gen", UID: generated.UID}}
	must(t, env.Client.Create(ctx, owned))

	key := func(webhook string) string {
		return webhook + ".workbench.sensorium.dev/" + webhooks.CorrelationAuditKey
	}
	for _, want := range []struct {
		resource, name string
		annotations    map[string]string
	}{
		{"terminalcommands", "gen", map[string]string{key("mterminalcommand"): id}},
		{"terminalcommands", "sup", map[string]string{key("mterminalcommand"): supplied}},
		{"waits", "w", map[string]string{key("vwait"): supplied}},
		{"artifacts", "a", map[string]string{key("martifact"): id, key("vartifact"): id}},
	} {
		eventually(t, 10*time.Second, fmt.Sprintf("the audit event of the create of %s/%s", want.resource, want.name), func() (bool, string) {
			got, err := createAuditAnnotations(ns, want.resource, want.name)
			if err != nil {
				return false, err.Error()
			}
			for k, v := range want.annotations {
				if got[k] != v {
					return false, fmt.Sprintf("annotation %s=%q, want %q (annotations %v)", k, got[k], v, got)
				}
			}
			return true, ""
		})
	}
}

// createAuditAnnotations reads the annotations of the completed create of the workbench
// object resource ns/name from kube-apiserver's audit log.
func createAuditAnnotations(ns, resource, name string) (map[string]string, error) {
	raw, err := os.ReadFile(env.Aggregation.AuditLog)
	if err != nil {
		return nil, err
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		var ev struct {
			Verb      string `json:"verb"`
			Stage     string `json:"stage"`
			ObjectRef struct {
				APIGroup, Resource, Subresource, Namespace, Name string
			} `json:"objectRef"`
			Annotations map[string]string `json:"annotations"`
		}
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		if ev.Verb == "create" && ev.Stage == "ResponseComplete" && ev.ObjectRef.APIGroup == wbv1.GroupVersion.Group &&
			ev.ObjectRef.Resource == resource && ev.ObjectRef.Subresource == "" && ev.ObjectRef.Namespace == ns && ev.ObjectRef.Name == name {
			return ev.Annotations, nil
		}
	}
	return nil, fmt.Errorf("no completed create of %s %s/%s in %d bytes of audit log", resource, ns, name, len(raw))
}
