package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// TestFreeCapacity runs a node agent process with small session caps (3 per node, 2 per
// environment) and checks, through the real API server and the manager:
//   - the node publishes its free capacity in WorkbenchNode status.free as sessions open;
//   - admission refuses a session the node has published no room for, with HTTP 429 and
//     the node's code session-cap-reached (per environment, then per node);
//   - the node stays the authority: sessions admission could not judge (their environment
//     did not exist yet) are refused by the node with the same code;
//   - such a refused session carries CapacityAvailable=False, and True once a slot is
//     free again (lastTransitionTime: when capacity returned); a new session then opens.
func TestFreeCapacity(t *testing.T) {
	const node = "node-cap"
	ctx := context.Background()
	na := newAgentNode(t, node, "cap", "capacityPublishMillis: 100\ncaps:\n  sessions: 3\n  sessionsPerEnvironment: 2\n  concurrentCommands: 8\n  pendingWaits: 50\n")
	p := na.start(t)
	defer p.StopLogging(t)
	ns := namespace(t)
	dirE := na.dir(t, "e")
	readyEnvironmentOn(t, ns, dirE, node) // environment e, session s: 1 of 3

	free := func(what string, ok func(f *wbv1.NodeFree) bool) *wbv1.NodeFree {
		t.Helper()
		var wn wbv1.WorkbenchNode
		eventually(t, 30*time.Second, "WorkbenchNode free capacity: "+what, func() (bool, string) {
			if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, &wn); err != nil {
				return false, err.Error()
			}
			return wn.Status.Free != nil && ok(wn.Status.Free), fmt.Sprintf("%+v", wn.Status.Free)
		})
		return wn.Status.Free
	}
	f := free("2 session slots", func(f *wbv1.NodeFree) bool { return f.Sessions == 2 })
	if f.Commands != 8 || f.Waits != 50 || f.ReaderTasks <= 0 || len(f.FullEnvironments) != 0 || f.VMs != nil {
		t.Fatalf("free capacity with one structured session open: %+v", f)
	}

	running := func(name string) {
		t.Helper()
		eventually(t, 30*time.Second, "session "+name+" Running", func() (bool, string) {
			var s wbv1.TerminalSession
			get(t, ns, name, &s)
			return s.Status.Phase == wbv1.SessionRunning, fmt.Sprintf("%+v", s.Status)
		})
	}
	refusedAtAdmission := func(s *wbv1.TerminalSession, want string) {
		t.Helper()
		err := env.Client.Create(ctx, s)
		var se *apierrors.StatusError
		if !errors.As(err, &se) || se.ErrStatus.Code != 429 || se.ErrStatus.Details == nil || len(se.ErrStatus.Details.Causes) == 0 ||
			string(se.ErrStatus.Details.Causes[0].Type) != string(actuation.CodeSessionCapReached) {
			t.Fatalf("creating session %s: want 429 session-cap-reached at admission, got %v", s.Name, err)
		}
		if !apierrors.IsTooManyRequests(err) || !strings.Contains(se.ErrStatus.Message, want) {
			t.Fatalf("admission refusal of %s: %q does not say %q", s.Name, se.ErrStatus.Message, want)
		}
		t.Logf("admission refused %s: %s", s.Name, se.ErrStatus.Message)
	}

	// Environment e at its per-environment cap (2): listed as full, a third session on it
	// refused at admission.
	must(t, env.Client.Create(ctx, session(ns, "s2", "e")))
	running("s2")
	free("e listed full, 1 slot", func(f *wbv1.NodeFree) bool {
		return f.Sessions == 1 && slices.Contains(f.FullEnvironments, wbv1.NodeEnvironmentRef{Namespace: ns, Name: "e"})
	})
	refusedAtAdmission(session(ns, "s3", "e"), "per-environment session cap")

	// A second environment takes the node's last slot: any session is refused at admission.
	dir := na.dir(t, "f")
	must(t, env.Client.Create(ctx, hostEnvironment(ns, "f", dir, node)))
	must(t, env.Client.Create(ctx, session(ns, "t1", "f")))
	running("t1")
	free("no slot", func(f *wbv1.NodeFree) bool { return f.Sessions == 0 })
	refusedAtAdmission(session(ns, "t2", "f"), "no free session slot")

	// Admission cannot judge a session whose environment does not exist yet; the node,
	// the authority, refuses it once it is bound.
	must(t, env.Client.Create(ctx, session(ns, "u1", "g")))
	dirG := na.dir(t, "g")
	must(t, env.Client.Create(ctx, hostEnvironment(ns, "g", dirG, node)))
	var u1 wbv1.TerminalSession
	eventually(t, 30*time.Second, "u1 refused by the node with CapacityAvailable=False", func() (bool, string) {
		get(t, ns, "u1", &u1)
		c := meta.FindStatusCondition(u1.Status.Conditions, wbv1.ConditionCapacityAvailable)
		return u1.Status.Phase == wbv1.SessionFailed && u1.Status.Refusal != nil && u1.Status.Refusal.Code == string(actuation.CodeSessionCapReached) &&
			c != nil && c.Status == metav1.ConditionFalse, fmt.Sprintf("%+v", u1.Status)
	})

	// A slot frees: the refused session says when capacity returned, and a retry opens.
	closedAt := time.Now().Add(-time.Second) // condition times have second granularity
	must(t, env.Client.Patch(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "t1", Namespace: ns}},
		client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"desiredState":"Closed"}}`))))
	eventually(t, 30*time.Second, "u1 CapacityAvailable=True after t1 closed", func() (bool, string) {
		get(t, ns, "u1", &u1)
		c := meta.FindStatusCondition(u1.Status.Conditions, wbv1.ConditionCapacityAvailable)
		return c != nil && c.Status == metav1.ConditionTrue && !c.LastTransitionTime.Time.Before(closedAt), fmt.Sprintf("%+v", u1.Status.Conditions)
	})
	if u1.Status.Phase != wbv1.SessionFailed {
		t.Fatalf("the refused session must stay Failed (a retry is a new session): %+v", u1.Status)
	}
	must(t, env.Client.Create(ctx, session(ns, "u2", "g")))
	running("u2")
	free("no slot again", func(f *wbv1.NodeFree) bool { return f.Sessions == 0 })
}
