package dataplane

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"sensorium.dev/workbench/internal/actuation"
)

// Error is the JSON body of every non-2xx response.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
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

// statusFor maps a stable code to its HTTP status. Codes not listed are
// refusals of the request's content and map to 400.
func statusFor(code string) int {
	switch code {
	case string(actuation.CodeUnauthenticated):
		return http.StatusUnauthorized
	case string(actuation.CodeForbidden), string(actuation.CodeRawInputDisabled), string(actuation.CodeSymlinkEscape):
		return http.StatusForbidden
	case string(actuation.CodeNotFound), string(actuation.CodePathNotFound):
		return http.StatusNotFound
	case string(actuation.CodeMethodNotAllowed):
		return http.StatusMethodNotAllowed
	case string(actuation.CodeSessionNotRunning):
		return http.StatusConflict
	case string(actuation.CodeBodyTooLarge), string(actuation.CodeInputTooLarge):
		return http.StatusRequestEntityTooLarge
	case string(actuation.CodeQueueFull), string(actuation.CodeReaderCapReached):
		return http.StatusTooManyRequests
	case string(actuation.CodeUnavailable), string(actuation.CodeOpenat2Unavailable), string(actuation.CodeInterrupted),
		string(actuation.CodeEnvironmentUnavailable), string(actuation.CodeVMNotRunning):
		return http.StatusServiceUnavailable
	case string(actuation.CodeInternal):
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

// classify turns any error into (status, body). Coded errors keep their code
// and message; anything else is an internal error whose detail is logged, not
// returned.
func classify(err error) (int, Error, bool) {
	var he *httpError
	if errors.As(err, &he) {
		return he.status, Error{Code: he.code, Message: he.message}, he.status >= 500
	}
	if errors.Is(err, ErrNotFound) {
		return http.StatusNotFound, Error{Code: string(actuation.CodeNotFound), Message: err.Error()}, false
	}
	var ar *actuation.Refusal
	if errors.As(err, &ar) && ar != nil {
		c := string(ar.Code)
		return statusFor(c), Error{Code: c, Message: ar.Error()}, false
	}
	if c := string(actuation.CodeOf(err)); c != "" {
		return statusFor(c), Error{Code: c, Message: err.Error()}, statusFor(c) >= 500
	}
	if c := string(actuation.CodeOf(err)); c != "" {
		return statusFor(c), Error{Code: c, Message: err.Error()}, statusFor(c) >= 500
	}
	return http.StatusInternalServerError, Error{Code: string(actuation.CodeInternal), Message: "internal error"}, true
}

// writeError writes err as a JSON {code, message} body.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, body, serverSide := classify(err)
	if serverSide {
		ctrl.LoggerFrom(r.Context()).Error(err, "Request failed", "method", r.Method, "path", r.URL.Path, "code", body.Code)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="workbench-node"`)
	}
	if strings.HasPrefix(r.URL.Path, "/v2/") {
		writeJSON(w, status, StatusFor(status, body.Code, body.Message))
		return
	}
	writeJSON(w, status, body)
}

// statusReasons maps the HTTP statuses of refusals to their metav1 reasons; any other is
// BadRequest.
var statusReasons = map[int]metav1.StatusReason{
	http.StatusUnauthorized:          metav1.StatusReasonUnauthorized,
	http.StatusForbidden:             metav1.StatusReasonForbidden,
	http.StatusNotFound:              metav1.StatusReasonNotFound,
	http.StatusConflict:              metav1.StatusReasonConflict,
	http.StatusGone:                  metav1.StatusReasonGone,
	http.StatusUnprocessableEntity:   metav1.StatusReasonInvalid,
	http.StatusRequestEntityTooLarge: metav1.StatusReasonRequestEntityTooLarge,
	http.StatusTooManyRequests:       metav1.StatusReasonTooManyRequests,
	http.StatusMethodNotAllowed:      metav1.StatusReasonMethodNotAllowed,
	http.StatusServiceUnavailable:    metav1.StatusReasonServiceUnavailable,
	http.StatusInternalServerError:   metav1.StatusReasonInternalError,
}

// StatusFor is the metav1.Status of a refusal on the v2 routes (and the aggregated API):
// the stable code is details.causes[0].reason and the prefix of message.
func StatusFor(status int, code, message string) *metav1.Status {
	reason, ok := statusReasons[status]
	if !ok {
		reason = metav1.StatusReasonBadRequest
	}
	if !strings.HasPrefix(message, code+": ") {
		message = code + ": " + message
	}
	return &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(status), Reason: reason, Message: message,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseType(code), Message: message}}},
	}
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
