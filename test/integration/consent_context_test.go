package integration

import (
	"context"
	"testing"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// TestConsentRememberedGrantHeldToReviewedContext (issue 16 item 7, seed 000 decisions 37 and
// 40): a remembered grant is tied to the operational context it was reviewed under. The
// request records the environment's context; the profile projects it on the grant's entry.
// Once the environment is raised, the grant reviewed under the lower context admits neither
// a new command nor a command it admitted earlier that has not started (re-evaluated): each
// is asked again, under the new context, and a grant reviewed there admits.
func TestConsentRememberedGrantHeldToReviewedContext(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	placedSetup(t, ns, "node-oc")
	op := operator(t, ns, "ivan")
	argv := []string{"/usr/bin/git", "--no-pager", "shortlog"}
	waitPlanned(t, ns, "e", "test")

	_, cr := createAwaiting(t, ns, "first", argv...)
	if cr.Spec.Descriptor.OperationalContext != "test" {
		t.Fatalf("request %s does not record the context it is reviewed under: %+v", cr.Name, cr.Spec.Descriptor)
	}
	must(t, op.Create(ctx, grant(ns, "g-test", cr.Name, wbv1.ConsentRememberExactArgv)))
	must(t, env.Client.Create(ctx, command(ns, "again", argv...)))
	for _, name := range []string{"first", "again"} {
		waitCommand(t, ns, name, name+" admitted by g-test under test", func(c *wbv1.TerminalCommand) bool {
			return c.Status.AdmittedBy == "g-test" && c.Status.AdmittedContext == "test"
		})
	}
	prof := getProfile(t, ns)
	if n := len(prof.Status.ConsentEntries); n != 1 || prof.Status.ConsentEntries[0].OperationalContext != "test" {
		t.Fatalf("the projected entry does not carry the reviewed context: %+v", prof.Status.ConsentEntries)
	}

	must(t, setContext(ns, "e", &wbv1.OperationalContext{Class: "production"}))
	waitPlanned(t, ns, "e", "production")
	_, raisedReq := createAwaiting(t, ns, "raised", argv...)
	if raisedReq.Spec.Descriptor.OperationalContext != "production" {
		t.Fatalf("request %s asked under %q, want production", raisedReq.Name, raisedReq.Spec.Descriptor.OperationalContext)
	}
	// What g-test admitted under test and has not started is decided again: asked again.
	for _, name := range []string{"first", "again"} {
		c, req := awaitingOwnRequest(t, ns, name)
		if req.Spec.Descriptor.OperationalContext != "production" || (name == "first" && req.Name == cr.Name) {
			t.Fatalf("%s re-asked with request %s under %q (first asked with %s)", name, req.Name, req.Spec.Descriptor.OperationalContext, cr.Name)
		}
		if c.Status.AdmittedBy == "g-test" {
			t.Fatalf("%s still admitted by the grant reviewed under test: %+v", name, c.Status)
		}
	}
	if g := getGrant(t, ns, "g-test"); g.Status.State != wbv1.ConsentGrantActive {
		t.Fatalf("the grant reviewed under test is %s: it stays in force for its own context", g.Status.State)
	}

	must(t, op.Create(ctx, grant(ns, "g-prod", raisedReq.Name, wbv1.ConsentRememberExactArgv)))
	for _, name := range []string{"raised", "first", "again"} {
		waitCommand(t, ns, name, name+" admitted by g-prod under production", func(c *wbv1.TerminalCommand) bool {
			return c.Status.AdmittedBy == "g-prod" && c.Status.AdmittedContext == "production" && isTrue(c.Status.Conditions, wbv1.ConditionAdmitted)
		})
	}
}
