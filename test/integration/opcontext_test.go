package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/kstate"
)

// setContext updates environment name's declared operational context (nil removes it),
// retrying on conflicts with the controllers' status writes.
func setContext(ns, name string, oc *wbv1.OperationalContext) error {
	return kstate.Update(env.Client, ns, name, &wbv1.Environment{}, func(e *wbv1.Environment) { e.Spec.OperationalContext = oc })
}

func getEnvironment(t *testing.T, ns, name string) *wbv1.Environment {
	t.Helper()
	return kstate.Get(t, env.Client, ns, name, &wbv1.Environment{})
}

// waitPlanned waits until environment name's plan was made at its current generation and
// returns it.
func waitPlanned(t *testing.T, ns, name string, want wbv1.ContextClass) *wbv1.Environment {
	t.Helper()
	return kstate.Until(t, env.Client, 20*time.Second, fmt.Sprintf("environment %s planned under %s at its generation", name, want), ns, name, &wbv1.Environment{},
		func(e *wbv1.Environment) bool {
			sc := meta.FindStatusCondition(e.Status.Conditions, wbv1.ConditionScheduled)
			return sc != nil && sc.Status == "True" && sc.ObservedGeneration == e.Generation && e.Status.EffectiveOperationalContext == want
		})
}

// TestOperationalContextOnlyRises: the floor comes from the selected capability (host-local
// shares the host's filesystem, so an experimental declaration is planned as test); raising
// the context advances the generation and re-plans it (new plan digest, Scheduled
// Replanned at the new generation); lowering it, or removing it below the declared class,
// is refused by the webhook with operational-context-lowered.
func TestOperationalContextOnlyRises(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	placedSetup(t, ns, "node-oc")

	// The requirement says nothing about sharing; the selected capability shares the host
	// read-write, so the test floor applies.
	low := environment(ns, "low")
	low.Spec.OperationalContext = &wbv1.OperationalContext{Class: "experimental"}
	must(t, env.Client.Create(ctx, low))
	if e := waitPlanned(t, ns, "low", "test"); !strings.HasSuffix(e.Status.CapabilityRef, ".host-local") {
		t.Fatalf("placed by %q", e.Status.CapabilityRef)
	}

	before := waitPlanned(t, ns, "e", "test")
	must(t, setContext(ns, "e", &wbv1.OperationalContext{Class: "production"}))
	after := waitPlanned(t, ns, "e", "production")
	if after.Generation <= before.Generation {
		t.Fatalf("raising the context did not advance the generation: %d -> %d", before.Generation, after.Generation)
	}
	if after.Status.PlanDigest == before.Status.PlanDigest || !strings.HasPrefix(string(after.Status.PlanDigest), "sha256:") {
		t.Fatalf("plan digest not re-derived: %s -> %s", before.Status.PlanDigest, after.Status.PlanDigest)
	}
	if sc := meta.FindStatusCondition(after.Status.Conditions, wbv1.ConditionScheduled); sc.Reason != wbv1.ReasonReplanned ||
		!strings.Contains(sc.Message, "production") || after.Status.NodeName != before.Status.NodeName {
		t.Fatalf("re-plan not visible: %+v node %s -> %s", sc, before.Status.NodeName, after.Status.NodeName)
	}

	for _, oc := range []*wbv1.OperationalContext{{Class: "test"}, {Class: "experimental"}, nil} {
		err := setContext(ns, "e", oc)
		mustRefuse(t, err, string(actuation.CodeOperationalContextLowered))
	}
	// Refused updates changed nothing.
	if e := getEnvironment(t, ns, "e"); e.Generation != after.Generation || e.Spec.OperationalContext.Class != "production" {
		t.Fatalf("a refused lowering changed the environment: generation %d spec %+v", e.Generation, e.Spec.OperationalContext)
	}
	// Equal (with a new summary) and higher are admitted.
	must(t, setContext(ns, "e", &wbv1.OperationalContext{Class: "production", Summary: ptr("release branch")}))
	must(t, setContext(ns, "e", &wbv1.OperationalContext{Class: "critical"}))
	waitPlanned(t, ns, "e", "critical")
}

// TestAdmissionSupersededByContextRaise: a command admitted under the old context (and not
// started: no node agent runs here) is not kept under the new one without re-evaluation.
// A profile admission is decided again and records the new context; an allow-once consent
// the operator gave under the old context is not used under the new one (refused
// operational-context-superseded).
func TestAdmissionSupersededByContextRaise(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	placedSetup(t, ns, "node-oc")
	op := operator(t, ns, "carol")

	must(t, env.Client.Create(ctx, command(ns, "by-profile", "/usr/bin/git", "--no-pager", "status", "--short")))
	askConsent(t, env.Client, ns, "by-consent", "/usr/bin/git", "--no-pager", "log")
	must(t, op.Create(ctx, grant(ns, "g-once", "by-consent-consent", wbv1.ConsentAllowOnce)))
	for _, name := range []string{"by-profile", "by-consent"} {
		waitCommand(t, ns, name, name+" admitted under test", func(c *wbv1.TerminalCommand) bool {
			return isTrue(c.Status.Conditions, wbv1.ConditionAdmitted) && c.Status.AdmittedContext == "test"
		})
	}

	must(t, setContext(ns, "e", &wbv1.OperationalContext{Class: "production"}))
	waitPlanned(t, ns, "e", "production")

	waitCommand(t, ns, "by-profile", "profile admission re-evaluated under production", func(c *wbv1.TerminalCommand) bool {
		a := meta.FindStatusCondition(c.Status.Conditions, wbv1.ConditionAdmitted)
		return a != nil && a.Status == "True" && c.Status.AdmittedContext == "production" && strings.Contains(a.Message, "re-evaluated") &&
			c.Status.AdmittedBy == "profile" && c.Status.Phase == wbv1.CommandPending
	})
	c := waitCommandPhase(t, ns, "by-consent", wbv1.CommandRefused)
	if c.Status.Refusal == nil || c.Status.Refusal.Code != string(actuation.CodeOperationalContextSuperseded) || isTrue(c.Status.Conditions, wbv1.ConditionAdmitted) {
		t.Fatalf("the allow-once consent given under test was used under production: %+v", c.Status)
	}
	// A command created after the raise is admitted under the new context directly.
	must(t, env.Client.Create(ctx, command(ns, "after", "/usr/bin/git", "--no-pager", "status")))
	waitCommand(t, ns, "after", "new command admitted under production", func(c *wbv1.TerminalCommand) bool {
		return isTrue(c.Status.Conditions, wbv1.ConditionAdmitted) && c.Status.AdmittedContext == "production"
	})
}
