package aggregated

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"sensorium.dev/workbench/internal/dataplane/protocol/v2"
)

// oneSize is a terminal size queue that reports one size, then ends.
type oneSize struct{ size *remotecommand.TerminalSize }

func (o *oneSize) Next() *remotecommand.TerminalSize {
	s := o.size
	o.size = nil
	return s
}

// screenSize reads the PTY session's screen size as cfg's identity.
func screenSize(t *testing.T, cfg *rest.Config, ns, session string) (rows, cols int) {
	t.Helper()
	code, body, _ := do(t, cfg, http.MethodGet, subPath(ns, "terminalsessions", session, "screen"), nil)
	if code != http.StatusOK {
		t.Fatalf("screen: %d %s", code, body)
	}
	var s protocol.ScreenResponse
	must(t, json.Unmarshal(body, &s))
	return s.Rows, s.Cols
}

// TestReadOnlyAttachCannotResize (issue 25 item 6): resizing changes the terminal every
// attacher and the program see, so it needs create terminalsessions/resize on the attach
// stream as on POST .../resize. An agent's and a viewer's read-only attach that send a
// terminal size are refused — the stream ends with a Failure status carrying the code
// forbidden — and the terminal keeps its size; the agent's POST .../resize is refused too.
// The operator's attach (with stdin) resizes.
func TestReadOnlyAttachCannotResize(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	setupSessions(t, ns)
	opCfg, _ := saUser(t, ns, "op", "workbench-operator")
	agentCfg, _ := saUser(t, ns, "agent", "workbench-agent")
	viewerCfg, _ := saUser(t, ns, "viewer", "workbench-viewer")
	rows0, cols0 := screenSize(t, opCfg, ns, "pty")

	attachPath := subPath(ns, "terminalsessions", "pty", "attach")
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := stream(sctx, agentCfg, attachPath+"?stdout=true&tty=true", remotecommand.StreamOptions{Stdout: io.Discard, Tty: true,
		TerminalSizeQueue: &oneSize{size: &remotecommand.TerminalSize{Width: uint16(cols0 + 17), Height: uint16(rows0 + 7)}}})
	cancel()
	if err == nil || !strings.Contains(err.Error(), "forbidden") || !strings.Contains(err.Error(), "resize") {
		t.Errorf("the agent's read-only attach sending a terminal size: %v, want the stream refused with forbidden naming resize", err)
	}
	if r, cl := screenSize(t, opCfg, ns, "pty"); r != rows0 || cl != cols0 {
		t.Fatalf("the agent's read-only attach resized the terminal to %dx%d (was %dx%d)", r, cl, rows0, cols0)
	}
	// The viewer role may not attach at all (no get terminalsessions/attach): refused before
	// any stream, its size never considered.
	if err := stream(ctx, viewerCfg, attachPath+"?stdout=true&tty=true", remotecommand.StreamOptions{Stdout: io.Discard, Tty: true,
		TerminalSizeQueue: &oneSize{size: &remotecommand.TerminalSize{Width: 99, Height: 33}}}); err == nil {
		t.Errorf("a viewer attached")
	}
	if code, body, _ := do(t, agentCfg, http.MethodPost, subPath(ns, "terminalsessions", "pty", "resize"), map[string]int{"rows": rows0 + 7, "cols": cols0 + 17}); code != http.StatusForbidden {
		t.Errorf("agent POST resize: %d %s, want 403", code, body)
	}
	if r, cl := screenSize(t, opCfg, ns, "pty"); r != rows0 || cl != cols0 {
		t.Fatalf("the terminal was resized to %dx%d by a refused identity (was %dx%d)", r, cl, rows0, cols0)
	}

	// The operator's attach with stdin carries its size, and the terminal takes it.
	inR, inW := io.Pipe()
	defer func() { _ = inW.Close() }()
	octx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() {
		errc <- stream(octx, opCfg, attachPath+"?stdin=true&stdout=true&tty=true", remotecommand.StreamOptions{Stdin: inR, Stdout: io.Discard, Tty: true,
			TerminalSizeQueue: &oneSize{size: &remotecommand.TerminalSize{Width: uint16(cols0 + 17), Height: uint16(rows0 + 7)}}})
	}()
	eventually(t, 30*time.Second, "the operator's attach resizes the terminal", func() (bool, string) {
		select {
		case err := <-errc:
			t.Fatalf("the operator's attach ended: %v", err)
		default:
		}
		r, cl := screenSize(t, opCfg, ns, "pty")
		return r == rows0+7 && cl == cols0+17, fmt.Sprintf("%dx%d", r, cl)
	})
}
