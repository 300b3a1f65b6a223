package sources

import (
	"archive/tar"
	"os"
	"path/filepath"
	"testing"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/sourcetest"
)

// TestOCISourceByDigestAndTag: an OCI artifact in an in-process registry (go-containerregistry's
// pkg/registry) on loopback materializes by digest, and by tag (this node's policy allows
// tags) with the digest recorded in status.roots; a layer with a symlink out is refused with
// its archive code.
func TestOCISourceByDigestAndTag(t *testing.T) {
	reg := sourcetest.ServeRegistry(t)
	digest := sourcetest.PushOCI(t, reg, "team/ws:v1", sourcetest.OCILayer(t, map[string]string{"a.txt": "one\n"}), sourcetest.OCILayer(t, map[string]string{"dir/b.txt": "two\n"}))
	for _, ref := range []string{reg + "/team/ws@" + digest, reg + "/team/ws:v1"} {
		ns := namespace(t)
		sourcedEnvironment(t, ns, wbv1.EnvironmentRoot{OCI: &wbv1.OCIRootSource{Ref: ref}})
		e := waitEnvironment(t, ns)
		if e.Status.Phase != wbv1.EnvironmentReady || len(e.Status.Roots) != 1 || e.Status.Roots[0].Resolved != digest || e.Status.Roots[0].Kind != "oci" ||
			e.Status.Roots[0].Bytes != int64(len("one\ntwo\n")) {
			t.Fatalf("%s: status = %+v", ref, e.Status)
		}
		copies, _ := filepath.Glob(filepath.Join(stateDir, "fixtures", string(e.UID), "repo", "fx-*"))
		if len(copies) != 1 {
			t.Fatalf("copies %v", copies)
		}
		if b, err := os.ReadFile(filepath.Join(copies[0], "dir/b.txt")); err != nil || string(b) != "two\n" {
			t.Fatalf("dir/b.txt %q %v", b, err)
		}
	}
	bad := sourcetest.PushOCI(t, reg, "team/bad:v1", sourcetest.OCILayer(t, nil, &tar.Header{Name: "etc", Linkname: "/etc", Typeflag: tar.TypeSymlink}))
	ns := namespace(t)
	sourcedEnvironment(t, ns, wbv1.EnvironmentRoot{OCI: &wbv1.OCIRootSource{Ref: reg + "/team/bad@" + bad}})
	e := waitEnvironment(t, ns)
	if e.Status.Phase != wbv1.EnvironmentFailed || len(e.Status.Roots) != 1 || e.Status.Roots[0].Reason != string(actuation.CodeArchiveLinkEscape) {
		t.Fatalf("symlink out: %+v", e.Status)
	}
}
