package aggregated

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/kstate"
	wbclient "sensorium.dev/workbench/pkg/client"
)

type archEntry struct {
	name, link string
	typ        byte
	mode       int64
	body       string
}

func tarOf(t *testing.T, gz bool, ents ...archEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w = &buf
	tw := tar.NewWriter(w)
	for _, e := range ents {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: mode}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		must(t, tw.WriteHeader(h))
		if e.typ == tar.TypeReg {
			_, _ = tw.Write([]byte(e.body))
		}
	}
	must(t, tw.Close())
	if !gz {
		return buf.Bytes()
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, _ = zw.Write(buf.Bytes())
	must(t, zw.Close())
	return z.Bytes()
}

func zipOf(t *testing.T, name, body string) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create(name)
	must(t, err)
	_, _ = w.Write([]byte(body))
	must(t, zw.Close())
	return buf.Bytes()
}

// TestArchiveSourceThroughAPI: archives uploaded through kube-apiserver (as `kubectl
// workbench cp` does) become fixture-copy.v1 roots: a good tar.gz materializes with its
// digest, entries and bytes in status.roots; each classic attack is refused with its own
// code in status.roots[].reason and the Ready condition, and nothing is written outside the
// managed copy.
func TestArchiveSourceThroughAPI(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns)
	opCfg, _ := saUser(t, ns, "op", "workbench-operator")
	op, err := wbclient.New(opCfg, ns)
	must(t, err)
	suiteDir := filepath.Dir(workspace)

	cases := []struct {
		name   string
		format wbv1.ArchiveFormat
		data   []byte
		code   actuation.Code // "" = materializes
	}{
		{"good", wbv1.ArchiveFormatTarGzip, tarOf(t, true, archEntry{name: "src/", typ: tar.TypeDir, mode: 0o755},
			archEntry{name: "src/main.go", typ: tar.TypeReg, body: "package main\n"}, archEntry{name: "link", typ: tar.TypeSymlink, link: "src/main.go"}), ""},
		{"absolute", wbv1.ArchiveFormatTar, tarOf(t, false, archEntry{name: "/tmp/wb-archive-escape", typ: tar.TypeReg, body: "x"}), actuation.CodeArchivePathAbsolute},
		{"dotdot", wbv1.ArchiveFormatTar, tarOf(t, false, archEntry{name: "../../../../wb-archive-escape", typ: tar.TypeReg, body: "x"}), actuation.CodeArchivePathTraversal},
		{"symlink-out", wbv1.ArchiveFormatTar, tarOf(t, false, archEntry{name: "l", typ: tar.TypeSymlink, link: "../../../.."}, archEntry{name: "l/wb-archive-escape", typ: tar.TypeReg, body: "x"}), actuation.CodeArchiveLinkEscape},
		{"hardlink-out", wbv1.ArchiveFormatTar, tarOf(t, false, archEntry{name: "h", typ: tar.TypeLink, link: "/etc/passwd"}), actuation.CodeArchiveLinkEscape},
		{"device", wbv1.ArchiveFormatTar, tarOf(t, false, archEntry{name: "null", typ: tar.TypeChar}), actuation.CodeArchiveSpecialFile},
		{"setuid", wbv1.ArchiveFormatTar, tarOf(t, false, archEntry{name: "su", typ: tar.TypeReg, mode: 0o4755, body: "x"}), actuation.CodeArchiveSetuid},
		{"duplicate", wbv1.ArchiveFormatTar, tarOf(t, false, archEntry{name: "a", typ: tar.TypeReg, body: "1"}, archEntry{name: "a", typ: tar.TypeReg, body: "2"}), actuation.CodeArchiveDuplicateEntry},
		{"zip-dotdot", wbv1.ArchiveFormatZip, zipOf(t, "../wb-archive-escape", "x"), actuation.CodeArchivePathTraversal},
	}
	for i, c := range cases {
		art := fmt.Sprintf("arch-%d", i)
		a, err := op.Upload(ctx, "e", art, bytes.NewReader(c.data))
		must(t, err)
		name := fmt.Sprintf("x-%d", i)
		must(t, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.EnvironmentSpec{
			Backend: wbv1.BackendFixtureCopy, NodeSelector: map[string]string{wbv1.NodeLabel: nodeName},
			Roots: []wbv1.EnvironmentRoot{{Name: "repo", Archive: &wbv1.ArchiveRootSource{ArtifactRef: wbv1.ObjectName(art), Format: c.format, Digest: &a.Status.Digest}}},
		}}))
		e := kstate.Until(t, env.Client, 60*time.Second, "environment "+name+" Ready or Failed", ns, name, &wbv1.Environment{},
			func(e *wbv1.Environment) bool {
				return e.Status.Phase == wbv1.EnvironmentReady || e.Status.Phase == wbv1.EnvironmentFailed
			})
		if len(e.Status.Roots) != 1 {
			t.Fatalf("%s: status.roots = %+v", c.name, e.Status.Roots)
		}
		r := e.Status.Roots[0]
		if c.code == "" {
			if e.Status.Phase != wbv1.EnvironmentReady || r.Resolved != string(a.Status.Digest) || r.Entries != 3 || r.Bytes != int64(len("package main\n")) || r.Kind != "archive" {
				t.Fatalf("%s: %+v", c.name, e.Status)
			}
			continue
		}
		var ready metav1.Condition
		for _, cond := range e.Status.Conditions {
			if cond.Type == wbv1.ConditionReady {
				ready = cond
			}
		}
		if e.Status.Phase != wbv1.EnvironmentFailed || r.Reason != string(c.code) || !strings.HasPrefix(ready.Message, string(c.code)+":") {
			t.Fatalf("%s: want %s; phase %s roots %+v Ready %q", c.name, c.code, e.Status.Phase, e.Status.Roots, ready.Message)
		}
	}
	// Nothing escaped: no file of that name anywhere in the suite's tree or at /.
	var escaped []string
	_ = filepath.WalkDir(suiteDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), "wb-archive-escape") {
			escaped = append(escaped, p)
		}
		return nil
	})
	for _, p := range []string{"/tmp/wb-archive-escape", "/wb-archive-escape", filepath.Join(filepath.Dir(suiteDir), "wb-archive-escape")} {
		if _, err := os.Lstat(p); err == nil {
			escaped = append(escaped, p)
		}
	}
	if len(escaped) > 0 {
		t.Fatalf("written outside the copy: %v", escaped)
	}
}
