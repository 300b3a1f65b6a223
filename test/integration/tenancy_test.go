package integration

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// TestHostRootOneTenant: a host directory bound by an Environment in one namespace is
// refused, with root-in-use, to an Environment in another namespace over the same
// directory, over a parent of it and over a child of it — read-write or read-only over a
// read-write binding — while a sibling directory (a shared string prefix, not a parent) and
// another backend's roots are admitted.
func TestHostRootOneTenant(t *testing.T) {
	ctx := context.Background()
	owner, other := namespace(t), namespace(t)
	base := "/srv/work/" + owner
	hostEnv := func(ns, name, hostPath string, access wbv1.RootAccess) *wbv1.Environment {
		return &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.EnvironmentSpec{
			Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: ptr(hostPath), Access: ptr(access)}},
		}}
	}
	must(t, env.Client.Create(ctx, hostEnv(owner, "demo", base+"/demo", wbv1.RootAccessReadWrite)))
	for _, c := range []struct {
		name, path string
		access     wbv1.RootAccess
	}{
		{"same", base + "/demo", wbv1.RootAccessReadWrite},
		{"same-unclean", base + "/demo/", wbv1.RootAccessReadWrite},
		{"parent", base, wbv1.RootAccessReadWrite},
		{"grandparent", "/srv/work", wbv1.RootAccessReadWrite},
		{"child", base + "/demo/src", wbv1.RootAccessReadWrite},
		{"same-read-only", base + "/demo", wbv1.RootAccessReadOnly},
	} {
		err := env.Client.Create(ctx, hostEnv(other, c.name, c.path, c.access))
		if c.name == "same-unclean" {
			mustRefuse(t, err, string(actuation.CodeRootInvalid)) // not clean: refused before tenancy
			continue
		}
		mustRefuse(t, err, string(actuation.CodeRootInUse))
	}
	// The same in the owner's own namespace.
	mustRefuse(t, env.Client.Create(ctx, hostEnv(owner, "again", base+"/demo", wbv1.RootAccessReadWrite)), string(actuation.CodeRootInUse))
	// A sibling whose name shares a prefix is another directory.
	must(t, env.Client.Create(ctx, hostEnv(other, "sibling", base+"/demo2", wbv1.RootAccessReadWrite)))
	// Read-only bindings of one tree pass admission; the node's rootSharing decides them.
	must(t, env.Client.Create(ctx, hostEnv(owner, "ro1", base+"/shared", wbv1.RootAccessReadOnly)))
	must(t, env.Client.Create(ctx, hostEnv(other, "ro2", base+"/shared/docs", wbv1.RootAccessReadOnly)))
	mustRefuse(t, env.Client.Create(ctx, hostEnv(other, "rw-over-ro", base+"/shared", wbv1.RootAccessReadWrite)), string(actuation.CodeRootInUse))
	// A fixture-copy source is copied, never bound: two environments may copy one source.
	for _, ns := range []string{owner, other} {
		must(t, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
			Backend: wbv1.BackendFixtureCopy, Roots: []wbv1.EnvironmentRoot{{Name: "repo", Source: ptr(base + "/demo")}},
		}}))
	}
}
