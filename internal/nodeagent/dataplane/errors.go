package dataplane

import (
	"encoding/json"
	"errors"
	"net/http"

	ctrl "sigs.k8s.io/controller-runtime"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/dataplane/protocol/v2"
)

// coded is a refusal's stable code and message; every non-2xx response carries it as a
// metav1.Status (protocol.StatusFor).
type coded struct {
	Code    string
	Message string
}

// httpError is an error that already knows its HTTP status and code.
type httpError struct {
	status  int
	code    string
	message string
	cause   error
}

func (e *httpError) Error() string {
	if e.cause != nil {
		return e.code + ": " + e.message + ": " + e.cause.Error()
	}
	return e.code + ": " + e.message
}

func (e *httpError) Unwrap() error { return e.cause }

func errorf(status int, code, message string) *httpError {
	return &httpError{status: status, code: code, message: message}
}

// classify turns any error into (status, body). Coded errors keep their code
// and message; anything else is an internal error whose detail is logged, not
// returned.
func classify(err error) (int, coded, bool) {
	var he *httpError
	if errors.As(err, &he) {
		return he.status, coded{Code: he.code, Message: he.message}, he.status >= 500
	}
	if errors.Is(err, ErrNotFound) {
		return http.StatusNotFound, coded{Code: string(actuation.CodeNotFound), Message: err.Error()}, false
	}
	if c := string(actuation.CodeOf(err)); c != "" {
		return protocol.HTTPStatusOf(c), coded{Code: c, Message: err.Error()}, protocol.HTTPStatusOf(c) >= 500
	}
	return http.StatusInternalServerError, coded{Code: string(actuation.CodeInternal), Message: "internal error"}, true
}

// writeError writes err as a metav1.Status body whose details.causes[0].type is the code.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, body, serverSide := classify(err)
	if serverSide {
		ctrl.LoggerFrom(r.Context()).Error(err, "Request failed", "method", r.Method, "path", r.URL.Path, "code", body.Code)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="workbench-node"`)
	}
	writeJSON(w, status, protocol.StatusFor(status, body.Code, body.Message))
}

// writeJSON writes v with status. Encoding errors can only come from the
// connection and are dropped (the status line is already sent).
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
