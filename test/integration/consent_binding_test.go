package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// createAwaiting creates command ns/name running argv and waits until it is held with its
// own consent request (awaitingOwnRequest).
func createAwaiting(t *testing.T, ns, name string, argv ...string) (*wbv1.TerminalCommand, *wbv1.ConsentRequest) {
	t.Helper()
	must(t, env.Client.Create(context.Background(), command(ns, name, argv...)))
	return awaitingOwnRequest(t, ns, name)
}

// awaitingOwnRequest waits until the command is held AwaitingConsent with a request bound
// to this very object (UID and argv digest), and returns that request.
func awaitingOwnRequest(t *testing.T, ns, name string) (*wbv1.TerminalCommand, *wbv1.ConsentRequest) {
	t.Helper()
	c := waitCommand(t, ns, name, "command "+name+" held with its own request", func(c *wbv1.TerminalCommand) bool {
		return c.Status.Phase == wbv1.CommandAwaitingConsent && c.Status.ConsentRequestRef != ""
	})
	cr := getRequest(t, ns, c.Status.ConsentRequestRef)
	d := cr.Spec.Descriptor
	if d.CommandUID != c.UID || d.ArgvDigest != c.Status.ArgvDigest || d.EnvironmentRef == "" || d.RememberedSpan == "" {
		t.Fatalf("request %s does not bind command %s (uid %s, %s): %+v", cr.Name, name, c.UID, c.Status.ArgvDigest, d)
	}
	if len(cr.OwnerReferences) != 0 {
		t.Fatalf("request %s is owned by %v: a remembered grant must outlive the command", cr.Name, cr.OwnerReferences)
	}
	if c.Status.AdmittedBy != "" || isTrue(c.Status.Conditions, wbv1.ConditionAdmitted) {
		t.Fatalf("command %s admitted while awaiting consent: %+v", name, c.Status)
	}
	return c, cr
}

// TestConsentRecreatedCommandIsNotAdmitted: the replay of issue 7. An allow-once grant
// admits command x; x is deleted and recreated under the same name with another argv (and,
// separately, with the same argv): the recreated object is another object, held for its
// own consent, never admitted by the consumed grant.
func TestConsentRecreatedCommandIsNotAdmitted(t *testing.T) {
	ctx := context.Background()
	ns, op := consentSetup(t, "erin")
	argv := []string{"/usr/bin/git", "--no-pager", "log"}
	first, cr := createAwaiting(t, ns, "x", argv...)
	must(t, op.Create(ctx, grant(ns, "g-once", cr.Name, wbv1.ConsentAllowOnce)))
	if g := getGrant(t, ns, "g-once"); g.Spec.RequestUID != cr.UID {
		t.Fatalf("grant not stamped with the request's UID: %q, want %q", g.Spec.RequestUID, cr.UID)
	}
	eventually(t, 20*time.Second, "allow-once admits x and is consumed by its UID", func() (bool, string) {
		c, g := getCommand(t, ns, "x"), getGrant(t, ns, "g-once")
		return c.Status.AdmittedBy == "g-once" && g.Status.ConsumedByUID == first.UID, fmt.Sprintf("cmd=%+v grant=%+v", c.Status, g.Status)
	})

	for i, again := range [][]string{
		{"/usr/bin/git", "--no-pager", "log", "--stat"}, // another argv
		argv, // the same argv on a new object
	} {
		must(t, env.Client.Delete(ctx, command(ns, "x")))
		waitCommandGone(t, ns, "x")
		c, _ := createAwaiting(t, ns, "x", again...)
		if c.UID == first.UID {
			t.Fatalf("case %d: not a new object", i)
		}
		waitGrant(t, ns, "g-once", fmt.Sprintf("case %d: the grant stays consumed by the first object", i), func(g *wbv1.ConsentGrant) bool {
			return g.Status.ConsumedByUID == first.UID && g.Status.State == wbv1.ConsentGrantConsumed
		})
	}
	// The request of the deleted command, answered only by a consumed allow-once grant, is
	// collected.
	eventually(t, 20*time.Second, "the first request collected", func() (bool, string) {
		var left wbv1.ConsentRequest
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cr.Name}, &left)
		return (apierrors.IsNotFound(err)) || (err == nil && left.UID != cr.UID), fmt.Sprint(err)
	})
}

// TestConsentAllowOnceBindsArgv: an allow-once grant admits only the argv of the command
// it answered. A second command with the same argv, and one with another argv, stay held;
// the command's argv cannot be changed after the request was made.
func TestConsentAllowOnceBindsArgv(t *testing.T) {
	ctx := context.Background()
	ns, op := consentSetup(t, "frank")
	_, cr := createAwaiting(t, ns, "a", "/usr/bin/git", "--no-pager", "log", "-1")
	must(t, env.Client.Create(ctx, command(ns, "b", "/usr/bin/git", "--no-pager", "log", "-1")))
	must(t, env.Client.Create(ctx, command(ns, "c", "/usr/bin/git", "--no-pager", "log", "-2")))
	awaitingOwnRequest(t, ns, "b")
	awaitingOwnRequest(t, ns, "c")
	// The argv is immutable: the reviewed digest cannot be swapped under the request.
	a := getCommand(t, ns, "a")
	a.Spec.Argv = []string{"/usr/bin/git", "--no-pager", "log", "-p"}
	mustRefuse(t, env.Client.Update(ctx, a), "immutable")

	must(t, op.Create(ctx, grant(ns, "g", cr.Name, wbv1.ConsentAllowOnce)))
	waitAdmittedBy(t, ns, "a", "g")
	// The projection keeps the consumed entry bound to a's UID and digest (the node agent
	// verifies it before starting a), and it admits nothing else.
	prof := getProfile(t, ns)
	a = getCommand(t, ns, "a")
	var bound bool
	for _, e := range prof.Status.ConsentEntries {
		if e.GrantRef == "g" {
			bound = e.CommandUID == string(a.UID) && e.ArgvDigest == a.Status.ArgvDigest && e.EnvironmentRef == "e"
		}
	}
	if !bound {
		t.Fatalf("projection does not bind g to a: %+v", prof.Status.ConsentEntries)
	}
	for _, n := range []string{"b", "c"} {
		if c := getCommand(t, ns, n); c.Status.Phase != wbv1.CommandAwaitingConsent || c.Status.AdmittedBy != "" {
			t.Fatalf("%s admitted by another command's allow-once grant: %+v", n, c.Status)
		}
	}
}

// TestConsentRememberedGrantNamesItsEnvironment: a remembered grant reviewed on environment
// e admits the same argv on e, never on another environment of the namespace.
func TestConsentRememberedGrantNamesItsEnvironment(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	placedSetup(t, ns, "node-a")
	must(t, env.Client.Create(ctx, environment(ns, "e2")))
	must(t, env.Client.Create(ctx, session(ns, "s2", "e2")))
	waitPlaced(t, ns, "e2")
	op := operator(t, ns, "grace")
	argv := []string{"/usr/bin/git", "--no-pager", "shortlog"}
	_, cr := createAwaiting(t, ns, "on-e", argv...)
	if cr.Spec.Descriptor.EnvironmentRef != "e" {
		t.Fatalf("request names environment %q", cr.Spec.Descriptor.EnvironmentRef)
	}
	must(t, op.Create(ctx, grant(ns, "g", cr.Name, wbv1.ConsentRememberExactArgv)))
	waitAdmittedBy(t, ns, "on-e", "g")
	other := command(ns, "on-e2", argv...)
	other.Spec.SessionRef = "s2"
	must(t, env.Client.Create(ctx, other))
	awaitingOwnRequest(t, ns, "on-e2")
	// Still admitted on the environment it was reviewed on.
	must(t, env.Client.Create(ctx, command(ns, "on-e-again", argv...)))
	waitAdmittedBy(t, ns, "on-e-again", "g")
	if c := getCommand(t, ns, "on-e2"); c.Status.AdmittedBy != "" {
		t.Fatalf("on-e2 admitted on another environment: %+v", c.Status)
	}
}

// TestConsentDurableGrantOutlivesCommand: a remembered grant stays in force after the command
// that prompted it is deleted: its request is kept, the grant stays active, and a later
// command with the same argv is admitted by it.
func TestConsentDurableGrantOutlivesCommand(t *testing.T) {
	ctx := context.Background()
	ns, op := consentSetup(t, "heidi")
	argv := []string{"/usr/bin/git", "--no-pager", "describe"}
	_, cr := createAwaiting(t, ns, "first", argv...)
	must(t, op.Create(ctx, grant(ns, "g", cr.Name, wbv1.ConsentRememberExactArgv)))
	waitAdmittedBy(t, ns, "first", "g")
	must(t, env.Client.Delete(ctx, command(ns, "first")))
	waitCommandGone(t, ns, "first")
	must(t, env.Client.Create(ctx, command(ns, "later", argv...)))
	waitAdmittedBy(t, ns, "later", "g")
	if left := getRequest(t, ns, cr.Name); left.UID != cr.UID {
		t.Fatalf("request replaced")
	}
	if g := getGrant(t, ns, "g"); g.Status.State != wbv1.ConsentGrantActive {
		t.Fatalf("grant inactive after its command was deleted: %+v", g.Status)
	}
}
