package nodeagent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// TestCommandOneHop: a command its profile admits is bound to its node when it is created
// (labels a client sent are overwritten, the cleanup finalizer is set), the node admits and
// claims it without waiting for the manager's gate, and the manager records that decision
// (Admitted=True by profile, the argv digest) without contradicting it.
func TestCommandOneHop(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, workDir(t))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/echo", nil, []string{"hello"})))
	c := command(ns, "c", "/bin/echo", "hello")
	c.Labels = map[string]string{wbv1.NodeLabel: "some-other-node", wbv1.EnvironmentLabel: "not-e"}
	must(t, env.Client.Create(ctx, c))
	if c.Labels[wbv1.NodeLabel] != nodeName || c.Labels[wbv1.EnvironmentLabel] != "e" || !controllerutil.ContainsFinalizer(c, wbv1.CleanupFinalizer) {
		t.Fatalf("created with labels %v finalizers %v: want bound to node %s, environment e, with the cleanup finalizer", c.Labels, c.Finalizers, nodeName)
	}
	got := waitFinal(t, ns, "c")
	if got.Status.Phase != wbv1.CommandSucceeded || got.Status.AdmittedBy != actuation.AdmittedByProfile {
		t.Fatalf("status = %+v", got.Status)
	}
	adm := meta.FindStatusCondition(got.Status.Conditions, wbv1.ConditionAdmitted)
	if adm == nil || adm.Status != metav1.ConditionTrue || adm.Reason != wbv1.ReasonAdmittedByProfile || !strings.Contains(adm.Message, "fast path") {
		t.Fatalf("Admitted = %+v: want True, recorded from the node's fast-path admission", adm)
	}
	want := actuation.ArgvDigest("p", []string{"/bin/echo", "hello"}, convert.Cwd(got.Spec.Cwd))
	if string(got.Status.ArgvDigest) != want || got.Status.CommandID != string(got.UID) {
		t.Fatalf("argvDigest %q commandID %q, want %q and the UID", got.Status.ArgvDigest, got.Status.CommandID, want)
	}
	if got.Status.Refusal != nil {
		t.Fatalf("refusal %+v on a command that ran", got.Status.Refusal)
	}
}

// TestCommandNeedingConsentNotTakenByNode: an argv the profile does not admit is never
// claimed by the node: the manager holds it AwaitingConsent with a ConsentRequest, and no
// Started condition appears.
func TestCommandNeedingConsentNotTakenByNode(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, workDir(t))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/echo", nil, []string{"hello"})))
	must(t, env.Client.Create(ctx, command(ns, "c", "/bin/echo", "other")))
	var c wbv1.TerminalCommand
	eventually(t, 30*time.Second, "command held for consent", func() (bool, string) {
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "c"}, &c))
		return c.Status.Phase == wbv1.CommandAwaitingConsent && c.Status.ConsentRequestRef != "", fmt.Sprintf("%+v", c.Status)
	})
	if s := meta.FindStatusCondition(c.Status.Conditions, wbv1.ConditionStarted); s != nil {
		t.Fatalf("the node claimed a command awaiting consent: %+v", s)
	}
	var cr wbv1.ConsentRequest
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: c.Status.ConsentRequestRef}, &cr))
	if cr.Spec.Descriptor.CommandUID != c.UID {
		t.Fatalf("consent request bound to %q, want %q", cr.Spec.Descriptor.CommandUID, c.UID)
	}
}
