package aggregated

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	dpprotocol "sensorium.dev/workbench/internal/dataplane/protocol/v2"
	wbclient "sensorium.dev/workbench/pkg/client"
)

func commandPhase(t testing.TB, ns, name string) wbv1.CommandPhase {
	t.Helper()
	var c wbv1.TerminalCommand
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &c))
	return wbv1.CommandPhaseFor(c.Status.Conditions)
}

// TestOutputBeforeStart: the output of a command that has not started (it waits for an
// operator's consent, so no node holds it yet) is not a 404. A plain GET returns no bytes
// and says NotStarted in X-Workbench-Command-State; follows wait (bounded) for the start
// and then stream from the first byte: a plain follow, and the client's WebSocket follow
// (which resumes after the bounded waits and kube-apiserver's request timeout end early
// attempts). After the command ends, its output is there for a plain GET.
func TestOutputBeforeStart(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s"}})
	must(t, env.Client.Create(ctx, profile(ns, "echo", "/bin/echo", func(s *wbv1.CommandProfileSpec) { s.AllowedArgPrefixes = []string{"admitted"} })))
	agentCfg, _ := saUser(t, ns, "agent", "workbench-agent")
	must(t, env.Client.Create(ctx, &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: "later", Namespace: ns},
		Spec: wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "echo", Argv: []string{"/bin/echo", "needs", "consent"},
			Cwd: wbv1.CwdAddress{Root: "repo"}, TimeoutSeconds: 30, OutputBytes: 1 << 20}}))
	eventually(t, 30*time.Second, "the command awaiting consent", func() (bool, string) {
		p := commandPhase(t, ns, "later")
		return p == wbv1.CommandAwaitingConsent, string(p)
	})
	path := subPath(ns, "terminalcommands", "later", "output")

	code, body, h := do(t, agentCfg, http.MethodGet, path, nil)
	if code != http.StatusOK || len(body) != 0 || h.Get(dpprotocol.CommandStateHeader) != dpprotocol.CommandStateNotStarted {
		t.Fatalf("plain GET before the start: %d %q %v", code, body, h)
	}
	// A bounded wait that ends before the start answers the same.
	code, body, h = do(t, agentCfg, http.MethodGet, path+"?follow=true&startWaitSeconds=1", nil)
	if code != http.StatusOK || len(body) != 0 || h.Get(dpprotocol.CommandStateHeader) != dpprotocol.CommandStateNotStarted {
		t.Fatalf("follow whose start wait ended: %d %q %v", code, body, h)
	}

	type res struct {
		body  string
		state string
		err   error
	}
	plain := make(chan res, 1)
	go func() {
		code, body, h := do(t, agentCfg, http.MethodGet, path+"?follow=true&startWaitSeconds=8", nil)
		plain <- res{string(body), h.Get(dpprotocol.CommandStateHeader), fmtCode(code)}
	}()
	ws := make(chan res, 1)
	var resumes atomic.Int32
	go func() {
		cl, err := wbclient.New(agentCfg, ns)
		if err != nil {
			ws <- res{err: err}
			return
		}
		cl.OnOutputResume = func(int64) { resumes.Add(1) }
		var out syncBuffer
		err = cl.CommandOutput(ctx, "later", true, 0, &out)
		ws <- res{body: out.String(), err: err}
	}()
	time.Sleep(time.Second) // both followers are parked before the approval (not a timed assertion)

	opUser := "op-" + ns
	must(t, env.Bind(ctx, "workbench-operator", opUser, ""))
	opCfg := rest.CopyConfig(env.Config)
	opCfg.Impersonate = rest.ImpersonationConfig{UserName: opUser}
	op, err := wbclient.New(opCfg, ns)
	must(t, err)
	var req string
	eventually(t, 30*time.Second, "the consent request", func() (bool, string) {
		l, err := op.ListConsentRequests(ctx, true)
		must(t, err)
		if len(l) == 1 {
			req = l[0].Name
		}
		return req != "", fmt.Sprint(len(l))
	})
	_, err = op.Decide(ctx, wbclient.DecideRequest{Request: req, Scope: string(wbv1.ConsentAllowOnce)})
	must(t, err)

	for name, ch := range map[string]chan res{"plain follow": plain, "client follow": ws} {
		select {
		case r := <-ch:
			if r.err != nil || r.body != "needs consent\n" {
				t.Fatalf("%s after the start: %q %v", name, r.body, r.err)
			}
			if name == "plain follow" && r.state != dpprotocol.CommandStateStarted {
				t.Fatalf("plain follow state header %q, want %s", r.state, dpprotocol.CommandStateStarted)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%s did not end after the command ran", name)
		}
	}
	t.Logf("the client's follow opened the output %d more time(s) before the start", resumes.Load())
	code, body, _ = do(t, agentCfg, http.MethodGet, path, nil)
	if code != http.StatusOK || string(body) != "needs consent\n" {
		t.Fatalf("plain GET after the end: %d %q", code, body)
	}
}

// fmtCode is nil for 200 and an error naming any other status.
func fmtCode(code int) error {
	if code == http.StatusOK {
		return nil
	}
	return fmt.Errorf("status %d", code)
}

// TestOutputFollowOutlivesRequestTimeout: kube-apiserver (here with --request-timeout
// RequestTimeout) cuts a plain-HTTP follow of output, which is not one of the
// subresources it treats as long-running; the client resumes it from the byte offset it
// has (?offset=N) and gets every byte once. The client's default follow, over WebSocket,
// is a hijacked connection that the request timeout does not cut: it is never resumed.
// The command is `tail -f`: a line at once, a second line after the request timeout, then
// cancel ends it.
func TestOutputFollowOutlivesRequestTimeout(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	dir := readyEnvironment(t, ns, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s"}})
	must(t, os.WriteFile(dir+"/live.txt", []byte("first\n"), 0o644))
	must(t, env.Client.Create(ctx, profile(ns, "tail", "/usr/bin/tail", func(s *wbv1.CommandProfileSpec) { s.AllowedArgPrefixes = []string{"-f", "live.txt"} })))
	agentCfg, _ := saUser(t, ns, "agent", "workbench-agent")
	must(t, env.Client.Create(ctx, &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: "long", Namespace: ns},
		Spec: wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "tail", Argv: []string{"/usr/bin/tail", "-f", "live.txt"},
			Cwd: wbv1.CwdAddress{Root: "repo"}, TimeoutSeconds: 60, OutputBytes: 1 << 20}}))

	type res struct {
		resumes int32
		err     error
	}
	follow := func(plain bool, out *syncBuffer) chan res {
		ch := make(chan res, 1)
		go func() {
			cl, err := wbclient.New(agentCfg, ns)
			if err != nil {
				ch <- res{err: err}
				return
			}
			cl.PlainFollow = plain
			var n atomic.Int32
			cl.OnOutputResume = func(int64) { n.Add(1) }
			err = cl.CommandOutput(ctx, "long", true, 0, out)
			ch <- res{n.Load(), err}
		}()
		return ch
	}
	var plainOut, wsOut syncBuffer
	plain, ws := follow(true, &plainOut), follow(false, &wsOut)
	for _, b := range []*syncBuffer{&plainOut, &wsOut} {
		if !waitFor(b, "first\n", 30*time.Second) {
			t.Fatalf("no first line: %q", b.String())
		}
	}
	// Outlast kube-apiserver's request timeout, then write the second line.
	time.Sleep(RequestTimeout + 2*time.Second)
	f, err := os.OpenFile(dir+"/live.txt", os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteString("second\n")
	must(t, err)
	must(t, f.Close())
	for _, b := range []*syncBuffer{&plainOut, &wsOut} {
		if !waitFor(b, "second\n", 30*time.Second) {
			t.Fatalf("no second line: %q", b.String())
		}
	}
	if code, body, _ := do(t, agentCfg, http.MethodPost, subPath(ns, "terminalcommands", "long", "cancel"), nil); code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, body)
	}
	for name, ch := range map[string]chan res{"plain": plain, "websocket": ws} {
		out := map[string]*syncBuffer{"plain": &plainOut, "websocket": &wsOut}[name]
		select {
		case r := <-ch:
			if r.err != nil || out.String() != "first\nsecond\n" {
				t.Fatalf("%s follow: %q %v", name, out.String(), r.err)
			}
			switch {
			case name == "plain" && r.resumes < 1:
				t.Fatalf("the plain follow was never resumed: kube-apiserver's %s request timeout did not cut it", RequestTimeout)
			case name == "websocket" && r.resumes != 0:
				t.Fatalf("the WebSocket follow was resumed %d time(s): it was cut", r.resumes)
			}
			t.Logf("%s follow: %d resume(s)", name, r.resumes)
		case <-time.After(time.Minute):
			t.Fatalf("%s follow did not end after cancel", name)
		}
	}
}
