package aggregated

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// TestArtifactClassificationDecidesDownload: an artifact's classification decides who may
// download it, at the node that serves the blob. A confidential and a restricted export are
// refused to the workbench-agent role (which may download internal ones) with
// artifact-classification-forbidden and no byte of content, and served to the
// workbench-operator role.
func TestArtifactClassificationDecidesDownload(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	exportDir(t, ns, "secret.txt", "classified-payload\n")
	stored := func(name string, class wbv1.Classification) {
		must(t, env.Client.Create(ctx, artifact(ns, name, exportSpec(class))))
		waitStored(t, ns, name)
	}
	stored("internal", "internal")
	stored("confidential", "confidential")
	stored("restricted", "restricted")
	agentCfg, _ := saUser(t, ns, "agent", "workbench-agent")
	operatorCfg, _ := saUser(t, ns, "operator", "workbench-operator")

	if code, body, _ := do(t, agentCfg, http.MethodGet, subPath(ns, "artifacts", "internal", "download"), nil); code != http.StatusOK ||
		!bytes.Contains(body, []byte("classified-payload")) {
		t.Fatalf("agent download of an internal artifact: %d (%d bytes)", code, len(body))
	}
	for _, name := range []string{"confidential", "restricted"} {
		code, body, _ := do(t, agentCfg, http.MethodGet, subPath(ns, "artifacts", name, "download"), nil)
		if code != http.StatusForbidden || !bytes.Contains(body, []byte(actuation.CodeArtifactClassificationForbidden)) ||
			bytes.Contains(body, []byte("classified-payload")) {
			t.Fatalf("agent download of a %s artifact: %d %s", name, code, body)
		}
		code, body, _ = do(t, operatorCfg, http.MethodGet, subPath(ns, "artifacts", name, "download"), nil)
		if code != http.StatusOK || !bytes.Contains(body, []byte("classified-payload")) {
			t.Fatalf("operator download of a %s artifact: %d (%d bytes)", name, code, len(body))
		}
	}
}
