package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

// A refused WebSocket handshake (a real HTTP server answering 403 with a metav1.Status, as
// the node does) surfaces as the served status with its code and class, not as an
// internal transport error.
func TestUpgradeRefusalKeepsStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":403,"reason":"Forbidden",` +
			`"message":"forbidden: user \"a\" may not create terminalsessions/attach","details":{"causes":[{"type":"forbidden","message":"x"}]}}`))
	}))
	defer srv.Close()
	exec, err := remotecommand.NewWebSocketExecutor(&rest.Config{Host: srv.URL}, http.MethodGet, srv.URL+"/attach?stdin=true")
	if err != nil {
		t.Fatal(err)
	}
	err = exec.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: &countingWriter{w: discard{}}})
	w := Wrap("terminalsession s attach", upgradeCause(err))
	var e *Error
	if !errors.As(w, &e) || e.Class != ClassForbidden {
		t.Fatalf("refused handshake: %v (%T %#v)", w, err, e)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
