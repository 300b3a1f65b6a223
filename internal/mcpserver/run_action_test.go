package mcpserver

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	wbclient "sensorium.dev/workbench/pkg/client"
)

// TestRunActionTakesCorrelationID: the run_action tool's input schema offers correlationID
// (issue 30 item 5), so an agent threads its own id through the run, its consent request
// and its artifacts.
func TestRunActionTakesCorrelationID(t *testing.T) {
	ctx := context.Background()
	s := New(func(context.Context, *mcp.CallToolRequest) (*wbclient.Client, error) { return nil, nil })
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ss.Close() }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.Close() }()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name != "run_action" {
			continue
		}
		b, err := json.Marshal(tool.InputSchema)
		if err != nil {
			t.Fatal(err)
		}
		var schema struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		}
		if err := json.Unmarshal(b, &schema); err != nil {
			t.Fatal(err)
		}
		if _, ok := schema.Properties["correlationID"]; !ok {
			t.Fatalf("run_action input has no correlationID: %s", b)
		}
		return
	}
	t.Fatal("no run_action tool")
}
