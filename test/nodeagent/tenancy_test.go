package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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

// TestHostRootTenancyAtNode: the node, not only the webhook, keeps a host directory to one
// tenant. Environments in other namespaces name the directory a Ready environment binds
// through symlinks — to the same directory, to its parent and to a child — strings the
// webhook cannot relate to it; the node resolves them, finds the directory claimed in its
// own table and fails each with root-in-use, so no session opens in it. Deleting the first
// environment frees the directory and a waiting environment becomes Ready.
func TestHostRootTenancyAtNode(t *testing.T) {
	ctx := context.Background()
	base := workDir(t)
	real := filepath.Join(base, "real")
	must(t, os.MkdirAll(filepath.Join(real, "sub"), 0o755))
	owner := namespace(t)
	readyEnvironment(t, owner, real)

	links := map[string]string{"same": real, "parent": base, "child": filepath.Join(real, "sub")}
	tenants := map[string]string{}
	for name, target := range links {
		link := filepath.Join(workDir(t), "link-"+name)
		must(t, os.Symlink(target, link))
		ns := namespace(t)
		tenants[name] = ns
		must(t, env.Client.Create(ctx, hostEnvironment(ns, "e", link, nodeName)))
		must(t, env.Client.Create(ctx, session(ns, "s", "e")))
	}
	refused := func(ns string) (bool, string) {
		var e wbv1.Environment
		get(t, ns, "e", &e)
		c := meta.FindStatusCondition(e.Status.Conditions, wbv1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && strings.HasPrefix(c.Message, string(actuation.CodeRootInUse)+":") &&
			e.Status.Phase != wbv1.EnvironmentReady, fmt.Sprintf("%+v", e.Status)
	}
	for name, ns := range tenants {
		eventually(t, 30*time.Second, "the "+name+" tenant refused by the node with root-in-use", func() (bool, string) { return refused(ns) })
		var s wbv1.TerminalSession
		get(t, ns, "s", &s)
		if s.Status.Phase == wbv1.SessionRunning {
			t.Fatalf("a session runs in the %s tenant's refused environment: %+v", name, s.Status)
		}
	}
	// The owner is untouched.
	var o wbv1.Environment
	get(t, owner, "e", &o)
	if o.Status.Phase != wbv1.EnvironmentReady {
		t.Fatalf("the owner's environment is no longer Ready: %+v", o.Status)
	}

	// Teardown frees the directory: with the other waiters gone, the same-directory tenant
	// is allocated once the owner's environment is deleted.
	for _, name := range []string{"parent", "child"} {
		must(t, env.Client.Delete(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: tenants[name]}}))
		eventually(t, 30*time.Second, "the "+name+" tenant deleted", func() (bool, string) {
			err := env.Client.Get(ctx, client.ObjectKey{Namespace: tenants[name], Name: "e"}, &wbv1.Environment{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	}
	must(t, env.Client.Delete(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: owner}}))
	eventually(t, 60*time.Second, "the same-directory tenant Ready once the owner is gone", func() (bool, string) {
		var e wbv1.Environment
		get(t, tenants["same"], "e", &e)
		return e.Status.Phase == wbv1.EnvironmentReady, fmt.Sprintf("%+v", e.Status)
	})
}
