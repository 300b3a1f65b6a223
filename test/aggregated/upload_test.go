package aggregated

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	wbclient "sensorium.dev/workbench/pkg/client"
)

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestArtifactUpload: an operator uploads through kube-apiserver (pkg/client, as `kubectl
// workbench cp` does); the node stores the blob, records digest and size in the Artifact's
// status, and the download returns the same bytes. A body above the cap is refused with
// 413 upload-too-large (streamed, and announced by Content-Length) and the Artifact stays
// empty; an export artifact takes no upload (409); content is immutable once stored (409);
// the agent and viewer roles may not upload (403 from kube-apiserver's RBAC).
func TestArtifactUpload(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s"}})
	opCfg, _ := saUser(t, ns, "op", "workbench-operator")
	op, err := wbclient.New(opCfg, ns)
	must(t, err)

	payload := []byte("uploaded bytes\x00\xff through three hops\n")
	a, err := op.Upload(ctx, "e", "in", bytes.NewReader(payload))
	must(t, err)
	sum := sha256.Sum256(payload)
	want := "sha256:" + hex.EncodeToString(sum[:])
	if string(a.Status.Digest) != want || a.Status.Size != int64(len(payload)) || a.Status.NodeName != nodeName {
		t.Fatalf("uploaded artifact status %+v, want digest %s size %d on %s", a.Status, want, len(payload), nodeName)
	}
	var got bytes.Buffer
	digest, n, err := op.Download(ctx, "in", &got)
	must(t, err)
	if digest != want || n != int64(len(payload)) || !bytes.Equal(got.Bytes(), payload) {
		t.Fatalf("download after upload: %s %d %q", digest, n, got.Bytes())
	}

	// Content is immutable.
	code, body, _ := do(t, opCfg, http.MethodPost, subPath(ns, "artifacts", "in", "upload"), "again")
	if code != http.StatusConflict || !strings.Contains(string(body), string(actuation.CodeImmutable)) {
		t.Fatalf("second upload: %d %s", code, body)
	}

	// Above the cap: a streamed body and an announced Content-Length are both refused.
	empty := artifact(ns, "big", wbv1.ArtifactSpec{Source: "upload"})
	must(t, env.Client.Create(ctx, empty))
	err = op.UploadTo(ctx, "big", io.LimitReader(zeros{}, wbclient.MaxUploadBytes+1))
	var we *wbclient.Error
	if !errors.As(err, &we) || we.Code != string(actuation.CodeUploadTooLarge) || we.Class != wbclient.ClassCapReached {
		t.Fatalf("streamed oversized upload: %v (%#v)", err, we)
	}
	hc, err := rest.HTTPClientFor(opCfg)
	must(t, err)
	req, err := http.NewRequest(http.MethodPut, hostURL(opCfg)+subPath(ns, "artifacts", "big", "upload"), io.LimitReader(zeros{}, wbclient.MaxUploadBytes+1))
	must(t, err)
	req.ContentLength = wbclient.MaxUploadBytes + 1
	// PUT is authorized as update: the operator role grants it.
	resp, err := hc.Do(req)
	must(t, err)
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(raw), string(actuation.CodeUploadTooLarge)) {
		t.Fatalf("announced oversized upload: %d %s", resp.StatusCode, raw)
	}
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(empty), empty))
	if empty.Status.Digest != "" {
		t.Fatalf("a refused upload recorded content: %+v", empty.Status)
	}

	// An export artifact takes no upload.
	must(t, env.Client.Create(ctx, artifact(ns, "exp", wbv1.ArtifactSpec{Source: "export", Root: ptr(wbv1.RootName("repo"))})))
	if code, body, _ := do(t, opCfg, http.MethodPost, subPath(ns, "artifacts", "exp", "upload"), "x"); code != http.StatusConflict ||
		!strings.Contains(string(body), string(actuation.CodeInvalidSpec)) {
		t.Fatalf("upload into an export artifact: %d %s", code, body)
	}

	// Neither the agent nor the viewer may upload.
	for _, role := range []string{"workbench-agent", "workbench-viewer"} {
		cfg, _ := saUser(t, ns, strings.TrimPrefix(role, "workbench-"), role)
		if code, body, _ := do(t, cfg, http.MethodPost, subPath(ns, "artifacts", "big", "upload"), "x"); code != http.StatusForbidden {
			t.Fatalf("%s upload: %d %s", role, code, body)
		}
	}
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(empty), empty))
	if empty.Status.Digest != "" {
		t.Fatalf("a forbidden upload recorded content: %+v", empty.Status)
	}
}
