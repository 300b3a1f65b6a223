package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/streaming/pkg/httpstream/wsstream"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	dpprotocol "sensorium.dev/workbench/internal/dataplane/protocol/v2"
)

// notBoundError: the object has no node yet (a command before admission, e.g. awaiting
// consent).
type notBoundError struct{ error }

func (e *notBoundError) Unwrap() error { return e.error }

// unboundOutput answers terminalcommands/output for a command not bound to a node yet:
// a plain GET returns no bytes with X-Workbench-Command-State NotStarted (Ended when the
// command became final without starting); ?follow=true waits, bounded by startWaitSeconds
// (default dpprotocol.DefaultStartWait, below kube-apiserver's request timeout), until the
// command is bound, then forwards to its node with what is left of the wait.
func (f *Forwarder) unboundOutput(ns, name string, caller user.Info) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		follow, _ := strconv.ParseBool(q.Get("follow"))
		wait := dpprotocol.DefaultStartWait
		if v := q.Get("startWaitSeconds"); v != "" {
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil || time.Duration(n)*time.Second > dpprotocol.MaxStartWait {
				writeStatus(w, dpprotocol.StatusFor(http.StatusBadRequest, string(actuation.CodeBadRequest),
					fmt.Sprintf("startWaitSeconds=%q must be a number of seconds up to %d", v, int(dpprotocol.MaxStartWait/time.Second))))
				return
			}
			wait = time.Duration(n) * time.Second
		}
		ctx := r.Context()
		start := time.Now()
		tc, err := f.awaitBinding(ctx, ns, name, follow, wait)
		if err != nil {
			if ctx.Err() == nil {
				writeStatus(w, dpprotocol.StatusFor(http.StatusServiceUnavailable, string(actuation.CodeNodeUnreachable), err.Error()))
			}
			return
		}
		if tc.Labels[wbv1.NodeLabel] != "" { // bound: its node answers (and waits for the start)
			left := max(wait-time.Since(start), 0)
			q.Set("startWaitSeconds", strconv.Itoa(int(left/time.Second)))
			r.URL.RawQuery = q.Encode()
			hctx := genericapirequest.WithUser(genericapirequest.WithNamespace(ctx, ns), caller)
			h, err := f.Handler(hctx, "terminalcommands", name, "output")
			if err != nil {
				writeStatus(w, dpprotocol.StatusFor(http.StatusServiceUnavailable, string(actuation.CodeNodeUnreachable), err.Error()))
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		state := dpprotocol.CommandStateNotStarted
		if wbv1.CommandIsFinal(tc.Status.Conditions) {
			state = dpprotocol.CommandStateEnded
		}
		if wsstream.IsWebSocketRequest(r) {
			writeStatus(w, dpprotocol.StatusFor(http.StatusConflict, string(actuation.CodeCommandNotStarted),
				fmt.Sprintf("terminal command %s/%s has not started (%s)", ns, name, wbv1.CommandPhaseFor(tc.Status.Conditions))))
			return
		}
		w.Header().Set(dpprotocol.CommandStateHeader, state)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
	})
}

// awaitBinding reads command ns/name and, with follow, watches it until it is bound to a
// node or final, or wait has passed; it returns the last state seen.
func (f *Forwarder) awaitBinding(ctx context.Context, ns, name string, follow bool, wait time.Duration) (*wbv1.TerminalCommand, error) {
	var tc wbv1.TerminalCommand
	if err := f.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &tc); err != nil {
		return nil, fmt.Errorf("reading TerminalCommand %s/%s: %w", ns, name, err)
	}
	done := func(t *wbv1.TerminalCommand) bool {
		return t.Labels[wbv1.NodeLabel] != "" || wbv1.CommandIsFinal(t.Status.Conditions)
	}
	wc, ok := f.c.(client.WithWatch)
	if !follow || done(&tc) || !ok || wait <= 0 {
		return &tc, nil
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	wi, err := wc.Watch(wctx, &wbv1.TerminalCommandList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": name},
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: tc.ResourceVersion}})
	if err != nil {
		return nil, fmt.Errorf("watching TerminalCommand %s/%s: %w", ns, name, err)
	}
	defer wi.Stop()
	for {
		select {
		case <-wctx.Done():
			return &tc, nil
		case ev, open := <-wi.ResultChan():
			if !open {
				return &tc, nil
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if t, ok := ev.Object.(*wbv1.TerminalCommand); ok {
					tc = *t
					if done(&tc) {
						return &tc, nil
					}
				}
			case watch.Deleted:
				return nil, errors.New("terminal command " + ns + "/" + name + " was deleted")
			}
		}
	}
}

// writeStatus writes a metav1.Status with its code as the HTTP status.
func writeStatus(w http.ResponseWriter, st *metav1.Status) {
	raw, _ := json.Marshal(st)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_, _ = w.Write(raw)
}
