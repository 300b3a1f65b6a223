package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/mcpserver"
)

// tsSDKVersion is the @modelcontextprotocol/sdk the TypeScript test installs.
const tsSDKVersion = "1.32.2"

// tsSDK installs the official TypeScript MCP SDK into a cache under bin/ (once per
// version) and returns the directory holding its node_modules. It skips, saying why,
// when node or npm is missing or the npm registry cannot be reached.
func tsSDK(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not on PATH: the TypeScript MCP client test needs node 20 and npm", tool)
		}
	}
	dir := filepath.Join(st.Env.Root, "bin", "npm", "mcp-sdk-"+tsSDKVersion)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err == nil {
		return dir
	}
	must(t, os.MkdirAll(filepath.Dir(dir), 0o755))
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".install-")
	must(t, err)
	defer func() { _ = os.RemoveAll(tmp) }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--no-save", "--prefix", tmp, "@modelcontextprotocol/sdk@"+tsSDKVersion)
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(filepath.Dir(dir), "cache"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("npm could not install @modelcontextprotocol/sdk@%s (the npm registry is unreachable from here?): %v\n%s", tsSDKVersion, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(dir); statErr != nil { // not a concurrent install that won
			t.Fatalf("moving the SDK into place: %v", err)
		}
	}
	return dir
}

// TestMCPTypeScriptClient: the official TypeScript SDK client (a client we did not write)
// lists the tools of `kubectl-workbench mcp`, runs git status (its output schema is
// validated by that client) and sees a refused argv as a tool error with its code.
func TestMCPTypeScriptClient(t *testing.T) {
	sdk := tsSDK(t)
	ns := mcpFixture(t)
	script := filepath.Join(sdk, "client.mjs") // beside node_modules, so imports resolve
	src, err := os.ReadFile(filepath.Join("testdata", "ts", "client.mjs"))
	must(t, err)
	must(t, os.WriteFile(script, src, 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{script, st.Bin("kubectl-workbench"), "--kubeconfig", st.Kubeconfig, "-n", ns, "--as", agentUser, "mcp"}
	cmd := exec.CommandContext(ctx, "node", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client.mjs: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var got struct {
		Server       struct{ Name string }
		Tools        []string
		Environments struct{ StructuredContent map[string]any }
		Run          struct {
			IsError           bool
			StructuredContent map[string]any
		}
		Refused struct {
			IsError bool
			Meta    map[string]map[string]any `json:"_meta"`
			Content []struct{ Text string }
		}
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("decoding the client's report: %v\n%s", err, stdout.String())
	}
	if got.Server.Name != "sensorium-workbench" || !slices.Equal(got.Tools, agentTools) {
		t.Fatalf("server %q tools %v", got.Server.Name, got.Tools)
	}
	if !strings.Contains(fmt.Sprint(got.Environments.StructuredContent), "name:e") {
		t.Fatalf("list_environments: %v", got.Environments)
	}
	if got.Run.IsError || got.Run.StructuredContent["phase"] != "Succeeded" || got.Run.StructuredContent["exitCode"] != float64(0) {
		t.Fatalf("run_command: %+v", got.Run)
	}
	if !got.Refused.IsError || got.Refused.Meta[mcpserver.RefusalMeta]["code"] != "profile-missing" ||
		len(got.Refused.Content) == 0 || !strings.Contains(got.Refused.Content[0].Text, "profile-missing") {
		t.Fatalf("refused run_command: %+v", got.Refused)
	}
}
