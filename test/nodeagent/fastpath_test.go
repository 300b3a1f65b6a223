package nodeagent

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
	"sensorium.dev/workbench/internal/platform/spans"
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
	// The manager records the node's admission once the node reported the start or the
	// outcome (not while the node's status write is in flight).
	eventually(t, 30*time.Second, "the node's admission recorded", func() (bool, string) {
		get(t, ns, "c", got)
		return meta.FindStatusCondition(got.Status.Conditions, wbv1.ConditionAdmitted) != nil, fmt.Sprintf("%+v", got.Status)
	})
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
	ns := commandInFreshEnvironment(t, "/bin/echo", []string{"hello"}, "other")
	var c wbv1.TerminalCommand
	eventually(t, 30*time.Second, "command held for consent", func() (bool, string) {
		get(t, ns, "c", &c)
		return c.Status.Phase == wbv1.CommandAwaitingConsent && c.Status.ConsentRequestRef != "", fmt.Sprintf("%+v", c.Status)
	})
	if s := meta.FindStatusCondition(c.Status.Conditions, wbv1.ConditionStarted); s != nil {
		t.Fatalf("the node claimed a command awaiting consent: %+v", s)
	}
	var cr wbv1.ConsentRequest
	get(t, ns, c.Status.ConsentRequestRef, &cr)
	if cr.Spec.Descriptor.CommandUID != c.UID {
		t.Fatalf("consent request bound to %q, want %q", cr.Spec.Descriptor.CommandUID, c.UID)
	}
}

// TestStaleProfileMemoNeverAdmits: the node admits a fast-path command against its memo of
// the profile (read by an earlier command) and re-reads the profile from the API server
// while its claim is written. Here the profile was tightened after the memo's read: the
// command must not run — the node re-decides against the current profile and, having
// claimed it, refuses it argv-not-admitted. The span recorder shows the memo path was the
// one taken (node-profile-changed: claimed against the memo, then the re-read differed); an
// attempt where it was not (the memo expired on a loaded machine, or the manager's gate
// decided first) must still not run the command, and is repeated.
func TestStaleProfileMemoNeverAdmits(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, workDir(t))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/echo", nil, []string{"warm", "ran"})))
	rec := spans.NewRecorder()
	prev := spans.Install(rec)
	defer spans.Install(prev)
	for attempt := 0; attempt < 5; attempt++ {
		n := strconv.Itoa(attempt)
		// Warm the node's memo: a command the profile admits, read the profile and ran.
		warm := command(ns, "warm"+n, "/bin/echo", "warm")
		must(t, env.Client.Create(ctx, warm))
		if got := waitFinal(t, ns, warm.Name); got.Status.Phase != wbv1.CommandSucceeded {
			t.Fatalf("warm-up command: %+v", got.Status)
		}
		// Tighten the profile: "ran" is no longer admitted.
		var p wbv1.CommandProfile
		get(t, ns, "p", &p)
		p.Spec.AllowedArgPrefixes = []string{"warm"}
		must(t, env.Client.Update(ctx, &p))
		c := command(ns, "c"+n, "/bin/echo", "ran")
		must(t, env.Client.Create(ctx, c))
		var got wbv1.TerminalCommand
		eventually(t, 30*time.Second, "command decided", func() (bool, string) {
			get(t, ns, c.Name, &got)
			return wbv1.CommandIsFinal(got.Status.Conditions) || got.Status.Phase == wbv1.CommandAwaitingConsent, fmt.Sprintf("%+v", got.Status)
		})
		if s := meta.FindStatusCondition(got.Status.Conditions, wbv1.ConditionStarted); s != nil && s.Status == metav1.ConditionTrue {
			t.Fatalf("a command the current profile does not admit was started: %+v", got.Status)
		}
		if got.Status.StdoutBytes != 0 || got.Status.StartTime != nil {
			t.Fatalf("the command ran: %+v", got.Status)
		}
		memoUsed := false
		for _, pt := range rec.Take(ns + "/" + c.Name) {
			memoUsed = memoUsed || pt.Step == "node-profile-changed" // claimed against the memo, then saw the change
		}
		rec.Take(ns + "/" + warm.Name)
		// Restore the profile for the next attempt.
		get(t, ns, "p", &p)
		p.Spec.AllowedArgPrefixes = []string{"warm", "ran"}
		must(t, env.Client.Update(ctx, &p))
		if !memoUsed {
			t.Logf("attempt %d: the memo was not used (expired or missed); the command was decided against a fresh read: %s", attempt, got.Status.Phase)
			continue
		}
		if got.Status.Phase != wbv1.CommandRefused || got.Status.Refusal == nil || got.Status.Refusal.Code != string(actuation.CodeArgvNotAdmitted) {
			t.Fatalf("claimed against a stale memo: want Refused %s, got %+v", actuation.CodeArgvNotAdmitted, got.Status)
		}
		return
	}
	t.Fatal("the node never admitted against its profile memo in 5 attempts")
}
