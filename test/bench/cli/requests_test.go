package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"

	"sensorium.dev/workbench/internal/cli"
	"sensorium.dev/workbench/internal/mcpserver"
	wbclient "sensorium.dev/workbench/pkg/client"
)

// The requests one `run` of a command that exists on an open session may make: the
// environment (one get, or the list that picks the default), the environment's sessions
// (one list), the profiles (one list), the create, one watch of the command, and one read
// of its output. No discovery, no second read of the command, no second watch.
const runRequestBudget = 6

// requestCounter counts the HTTP requests that pass through it (WebSocket upgrades too:
// client-go builds their round tripper from the same config).
type requestCounter struct {
	mu   sync.Mutex
	reqs []string
}

func (c *requestCounter) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			c.mu.Lock()
			what := r.Method + " " + r.URL.Path
			if r.URL.Query().Get("watch") == "true" {
				what += " (watch)"
			}
			if r.Header.Get("Upgrade") != "" {
				what += " (upgrade " + r.Header.Get("Upgrade") + ")"
			}
			c.reqs = append(c.reqs, what)
			c.mu.Unlock()
			return rt.RoundTrip(r)
		})
	})
	return cfg
}

func (c *requestCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.reqs
	c.reqs = nil
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestRunRequestBudget counts, with a counting RoundTripper around the real client against
// the real API server, the requests of `kubectl workbench run` (in process: the same
// command tree the plugin binary runs) and of the MCP run_command tool, each running
// /bin/true on an environment with an open session, and fails when either makes more than
// runRequestBudget: a request added to the run path must be argued for here.
func TestRunRequestBudget(t *testing.T) {
	setup(t)
	// The first run creates the session (a one-time cost, not counted).
	if out, code := runCLI(nil, "run", "-e", "e", "--", "/bin/true"); code != 0 {
		t.Fatalf("warm-up run: exit %d\n%s", code, out)
	}
	check := func(what string, reqs []string) {
		t.Helper()
		t.Logf("%s: %d requests:\n  %s", what, len(reqs), strings.Join(reqs, "\n  "))
		for _, r := range reqs {
			if strings.HasPrefix(r, "GET /api ") || r == "GET /api" || r == "GET /apis" || strings.HasPrefix(r, "GET /apis/workbench.sensorium.dev/v1alpha1 ") || r == "GET /apis/workbench.sensorium.dev/v1alpha1" {
				t.Errorf("%s: discovery request %q: the workbench kinds are compiled in", what, r)
			}
		}
		if len(reqs) > runRequestBudget {
			t.Errorf("%s made %d requests, more than the budget of %d", what, len(reqs), runRequestBudget)
		}
	}
	for _, args := range [][]string{
		{"run", "-e", "e", "--", "/bin/true"},
		{"run", "--", "/bin/true"}, // the default environment: its list replaces the get
		{"run", "-e", "e", "--", "/bin/echo", "hello"},
	} {
		counter := &requestCounter{}
		out, code := runCLI(counter.wrap, args...)
		if code != 0 {
			t.Fatalf("kubectl workbench %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		if args[len(args)-1] == "hello" && !strings.Contains(out, "hello") {
			t.Errorf("kubectl workbench %s: output %q lacks the command's output", strings.Join(args, " "), out)
		}
		check("kubectl workbench "+strings.Join(args, " "), counter.take())
	}

	// The MCP run_command tool over an in-memory transport, as a caller's client.
	counter := &requestCounter{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wc, err := wbclient.New(counter.wrap(st.Env.Config), ns)
	must(t, err)
	srv := mcpserver.New(func(context.Context, *mcp.CallToolRequest) (*wbclient.Client, error) { return wc, nil })
	ct, stt := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, stt, nil)
	must(t, err)
	defer func() { _ = ss.Close() }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "count", Version: "0"}, nil).Connect(ctx, ct, nil)
	must(t, err)
	defer func() { _ = cs.Close() }()
	counter.take() // building the client and connecting ask the API server nothing; the call is what is counted
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_command", Arguments: map[string]any{"argv": []string{"/bin/echo", "hello"}, "environment": "e"}})
	must(t, err)
	if res.IsError || !strings.Contains(fmt.Sprint(res.StructuredContent), "hello") {
		t.Fatalf("run_command: error=%v content=%v", res.IsError, res.StructuredContent)
	}
	check("MCP run_command", counter.take())
}

// runCLI runs the plugin's command tree in process with the stack's kubeconfig.
func runCLI(wrap func(*rest.Config) *rest.Config, args ...string) (string, int) {
	var out bytes.Buffer
	code := cli.MainWrapped(append([]string{"--kubeconfig", st.Kubeconfig, "-n", ns}, args...),
		genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out}, wrap)
	return out.String(), code
}
