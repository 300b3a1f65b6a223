package nodeagent

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

func gone(ctx context.Context, obj client.Object) func() (bool, string) {
	return func() (bool, string) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return true, "gone"
		}
		return false, fmt.Sprintf("err=%v finalizers=%v deletion=%v", err, obj.GetFinalizers(), obj.GetDeletionTimestamp())
	}
}

// dirsNamed lists the directories under root named name (a managed copy lives under a
// directory named by its environment's UID).
func dirsNamed(root, name string) []string {
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == name {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestDeletingRunningWorkStopsIt deletes a running command (its process stops, the object
// goes), then an Environment with a running command in it (the node drains it: the command
// ends Cancelled, its process stops, the environment goes).
func TestDeletingRunningWorkStopsIt(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, workDir(t))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/sleep", nil, []string{"30"})))

	running := func(name, arg string) *wbv1.TerminalCommand {
		c := command(ns, name, "/bin/sleep", arg)
		must(t, env.Client.Create(ctx, c))
		eventually(t, 30*time.Second, "command "+name+" running", func() (bool, string) {
			refresh(t, c)
			return c.Status.Phase == wbv1.CommandRunning && len(findProcess("/bin/sleep", arg)) == 1, fmt.Sprintf("%+v", c.Status)
		})
		if !controllerutil.ContainsFinalizer(c, wbv1.CleanupFinalizer) {
			t.Fatalf("running command %s has no cleanup finalizer: %v", name, c.Finalizers)
		}
		return c
	}

	c := running("del", "302.5")
	must(t, env.Client.Delete(ctx, c))
	eventually(t, 30*time.Second, "the deleted command to go", gone(ctx, c))
	if left := findProcess("/bin/sleep", "302.5"); len(left) != 0 {
		t.Fatalf("the deleted command's process still runs: %v", left)
	}

	c2 := running("drained", "303.5")
	var e wbv1.Environment
	get(t, ns, "e", &e)
	must(t, env.Client.Delete(ctx, &e))
	eventually(t, 30*time.Second, "the command of the deleted environment to end Cancelled", func() (bool, string) {
		refresh(t, c2)
		return c2.Status.Phase == wbv1.CommandCancelled, fmt.Sprintf("%+v", c2.Status)
	})
	if left := findProcess("/bin/sleep", "303.5"); len(left) != 0 {
		t.Fatalf("the drained command's process still runs: %v", left)
	}
	eventually(t, 30*time.Second, "the deleted environment to go", gone(ctx, &e))
	var s wbv1.TerminalSession
	get(t, ns, "s", &s)
	must(t, env.Client.Delete(ctx, &s))
	eventually(t, 30*time.Second, "the session to go", gone(ctx, &s))
	must(t, env.Client.Delete(ctx, c2))
	eventually(t, 30*time.Second, "the finished command to go", gone(ctx, c2))
}

// TestFinalizerHoldsUntilTheNodeCleansUp deletes a fixture-copy Environment while its node
// agent is stopped: the finalizer keeps the object; the restarted agent tears the copy down
// and the finalizer is released.
func TestFinalizerHoldsUntilTheNodeCleansUp(t *testing.T) {
	const node = "node-fin"
	ctx := context.Background()
	na := newAgentNode(t, node, "fin", "")
	state := na.state
	src := na.dir(t, "src")
	must(t, writeFile(filepath.Join(src, "a.txt"), "fixture\n"))

	first := na.start(t)
	ns := namespace(t)
	e := &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendFixtureCopy, Roots: []wbv1.EnvironmentRoot{{Name: "repo", Source: ptr(src)}},
		NodeSelector: map[string]string{wbv1.NodeLabel: node},
	}}
	must(t, env.Client.Create(ctx, e))
	eventually(t, 60*time.Second, "the fixture-copy environment Ready with its finalizer", func() (bool, string) {
		refresh(t, e)
		return e.Status.Phase == wbv1.EnvironmentReady && controllerutil.ContainsFinalizer(e, wbv1.CleanupFinalizer),
			fmt.Sprintf("%+v finalizers=%v\nagent log:\n%s", e.Status, e.Finalizers, first.LogTail())
	})
	copies := dirsNamed(state, string(e.UID))
	if len(copies) == 0 {
		t.Fatalf("no managed copy named %s under %s", e.UID, state)
	}
	must(t, first.Crash())

	must(t, env.Client.Delete(ctx, e))
	refresh(t, e)
	if e.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(e, wbv1.CleanupFinalizer) {
		t.Fatalf("the deleted environment should be held by its finalizer: deletion=%v finalizers=%v", e.DeletionTimestamp, e.Finalizers)
	}
	if left := dirsNamed(state, string(e.UID)); len(left) == 0 {
		t.Fatal("the copy vanished while no agent ran")
	}

	second := na.start(t)
	defer second.Stop()
	eventually(t, 60*time.Second, "the restarted agent to tear the copy down and the finalizer to be released", func() (bool, string) {
		ok, seen := gone(ctx, e)()
		return ok, seen + "\nagent log:\n" + second.LogTail()
	})
	if left := dirsNamed(state, string(e.UID)); len(left) != 0 {
		t.Fatalf("the copy outlived its environment: %v", left)
	}
}

// TestFinalizerEscapeWhenTheNodeIsLost: a finalizer never wedges deletion when no node
// agent will come back. An object bound to a node without a WorkbenchNode, or whose
// heartbeat is older than the manager's bound, is released by the manager.
func TestFinalizerEscapeWhenTheNodeIsLost(t *testing.T) {
	ctx := context.Background()
	stale := &wbv1.WorkbenchNode{ObjectMeta: metav1.ObjectMeta{Name: "node-stale"}}
	must(t, env.Client.Create(ctx, stale))
	stale.Status.HeartbeatTime = &metav1.Time{Time: time.Now().Add(-time.Hour)}
	must(t, env.Client.Status().Update(ctx, stale))

	for _, node := range []string{"node-never-existed", "node-stale"} {
		t.Run(node, func(t *testing.T) {
			ns := namespace(t)
			e := hostEnvironment(ns, "e", "/nonexistent", "no-such-capability")
			must(t, env.Client.Create(ctx, e))
			eventually(t, 30*time.Second, "the manager to add the cleanup finalizer", func() (bool, string) {
				refresh(t, e)
				return controllerutil.ContainsFinalizer(e, wbv1.CleanupFinalizer), fmt.Sprintf("%v", e.Finalizers)
			})
			// Bind it to the lost node as placement would (status as an administrator).
			must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(e), e); err != nil {
					return err
				}
				e.Status.NodeName = node
				return env.Client.Status().Update(ctx, e)
			}))
			must(t, env.Client.Delete(ctx, e))
			eventually(t, 30*time.Second, "the manager to release the finalizer of an object on a lost node", gone(ctx, e))
		})
	}
}
