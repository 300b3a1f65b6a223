package client

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"sensorium.dev/workbench/internal/actuation"
)

// Class groups refusal codes by what a caller can do about them; each class has one exit
// code of kubectl-workbench (docs/cli.md).
type Class string

const (
	ClassRefused     Class = "refused"     // admission or policy refused the request as written
	ClassNotFound    Class = "not-found"   // a named object or path does not exist
	ClassForbidden   Class = "forbidden"   // RBAC or node restriction: the identity may not do this
	ClassConsent     Class = "consent"     // an operator denied, let expire or revoked consent
	ClassCapReached  Class = "cap-reached" // a bounded queue, cap or size limit is full; retry later
	ClassUnavailable Class = "unavailable" // the environment, session, VM or node is not there to act
	ClassRuntime     Class = "runtime"     // the node could not run or clean up what was admitted
	ClassTimedOut    Class = "timed-out"   // a command, wait or probe reached its deadline
	ClassCancelled   Class = "cancelled"   // the command was cancelled
	ClassUsage       Class = "usage"       // the caller's arguments are malformed
	ClassInternal    Class = "internal"    // anything else (transport, server error)
)

// ExitCodes maps every class to the exit code of kubectl-workbench. A command's own exit
// code (run) is passed through unchanged and may overlap these.
var ExitCodes = map[Class]int{
	ClassUsage:       64,
	ClassRefused:     65,
	ClassNotFound:    66,
	ClassConsent:     67,
	ClassUnavailable: 69,
	ClassRuntime:     70,
	ClassInternal:    71,
	ClassCapReached:  75,
	ClassForbidden:   77,
	ClassTimedOut:    124,
	ClassCancelled:   130,
}

// codeClasses lists the codes whose class is not ClassRefused (the default for admission
// refusals of the closed vocabulary), listed by class; a code stands in one class.
var codeClasses = func() map[actuation.Code]Class {
	m := map[actuation.Code]Class{}
	for class, codes := range map[Class][]actuation.Code{
		ClassNotFound: {
			actuation.CodeProfileMissing, actuation.CodeSessionMissing, actuation.CodeCatalogEntryMissing,
			actuation.CodeActionNotAllowlisted,
		},
		ClassForbidden: {actuation.CodeNodeRestricted, actuation.CodeConsentNotOperator},
		ClassConsent: {
			actuation.CodeConsentDenied, actuation.CodeConsentExpired, actuation.CodeConsentRevoked,
			actuation.CodeConsentOperatorBindingInactive, actuation.CodeConsentCapabilityNotGrantable,
		},
		ClassCapReached: {
			actuation.CodeSessionCapReached, actuation.CodeReaderCapReached, actuation.CodeQueueFull,
			actuation.CodeEventBufferFull, actuation.CodeCommandCapReached, actuation.CodeVMCapReached,
			actuation.CodeWatchCapReached, actuation.CodeInputTooLarge,
		},
		ClassUnavailable: {
			actuation.CodeEnvironmentUnavailable, actuation.CodeSessionClosed,
			actuation.CodeSessionNotRunning, actuation.CodeVMNotRunning, actuation.CodeInterrupted,
			actuation.CodeActionClassUnavailable,
		},
		ClassRuntime: {
			actuation.CodeSandboxSetupFailed, actuation.CodeCleanupIncomplete, actuation.CodeStartFailed,
			actuation.CodeSourceFailed, actuation.CodeLandlockUnavailable, actuation.CodeWatchUnavailable,
			actuation.CodeBootFailed, actuation.CodeBootTimeout, actuation.CodeStateDirTooLong,
			actuation.CodeConditionUnreachable, actuation.CodeScriptHashMismatch,
			actuation.CodeScriptExecutableMissing, actuation.CodeScriptNotExecutable,
		},
		ClassTimedOut: {actuation.CodeProbeTimedOut, actuation.CodeActionTimeout},
	} {
		for _, c := range codes {
			if prev, dup := m[c]; dup { // a literal map key twice would not compile either
				panic(fmt.Sprintf("refusal code %s in classes %s and %s", c, prev, class))
			}
			m[c] = class
		}
	}
	return m
}()

// ClassOf returns the class of a refusal code. Codes outside the closed vocabulary (a newer
// server) are classed by their HTTP status when known, else as refused.
func ClassOf(code string) Class {
	if c, ok := codeClasses[actuation.Code(code)]; ok {
		return c
	}
	switch {
	case strings.HasSuffix(code, "-cap-reached"), strings.HasSuffix(code, "-too-large"), code == "queue-full":
		return ClassCapReached
	case code == "not-found":
		return ClassNotFound
	case code == "forbidden" || code == "raw-input-disabled":
		return ClassForbidden
	case code == "unavailable" || strings.HasSuffix(code, "-unreachable"):
		return ClassUnavailable
	}
	return ClassRefused
}

// Error is a refusal or failure with its stable code (empty when the server gave none),
// its class and the object it concerns.
type Error struct {
	Code    string `json:"code,omitempty"`
	Class   Class  `json:"class"`
	Message string `json:"message"`
	Object  string `json:"object,omitempty"`
	Err     error  `json:"-"`
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Object != "" {
		b.WriteString(e.Object + ": ")
	}
	if e.Code != "" && !strings.HasPrefix(e.Message, e.Code) {
		b.WriteString(e.Code + ": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// ExitCode is the kubectl-workbench exit code of the error's class.
func (e *Error) ExitCode() int { return ExitCodes[e.Class] }

// refused builds an Error for a refusal recorded in an object's status.
func refused(object, code, message string) *Error {
	return &Error{Code: code, Class: ClassOf(code), Message: message, Object: object}
}

// Usage is an Error of class usage.
func Usage(format string, args ...any) *Error {
	return &Error{Class: ClassUsage, Message: fmt.Sprintf(format, args...)}
}

// codeInText finds "<code>:" of the closed vocabulary in a server message (the webhooks
// write refusals as "<code>: <message>"); the longest match wins.
var codeInText = func() *regexp.Regexp {
	codes := actuation.Codes()
	names := make([]string, len(codes))
	for i, c := range codes {
		names[i] = regexp.QuoteMeta(string(c))
	}
	slices.SortFunc(names, func(a, b string) int { return len(b) - len(a) })
	return regexp.MustCompile(`(?:^|[\s:"(])(` + strings.Join(names, "|") + `):`)
}()

var codeShape = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)

// Wrap turns any error of an API call on object into an *Error: the refusal code comes from
// the status cause (aggregated API), else from a "<code>:" in the message (webhooks), and
// the class from the code or else the HTTP status.
func Wrap(object string, err error) error {
	if err == nil {
		return nil
	}
	var we *Error
	if errors.As(err, &we) {
		return err
	}
	e := &Error{Object: object, Message: err.Error(), Err: err, Class: ClassInternal}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		st := status.Status()
		e.Message = st.Message
		if st.Details != nil {
			for _, c := range st.Details.Causes {
				if codeShape.MatchString(string(c.Type)) { // the aggregated API's stable code (JSON "reason")
					e.Code = string(c.Type)
					break
				}
			}
		}
		if e.Code == "" {
			if m := codeInText.FindStringSubmatch(st.Message); m != nil {
				e.Code = m[1]
			}
		}
		if e.Code != "" {
			e.Class = ClassOf(e.Code)
			if e.Class == ClassRefused {
				e.Class = classOfStatus(int(st.Code), ClassRefused)
			}
		} else {
			e.Class = classOfStatus(int(st.Code), ClassInternal)
		}
		return e
	}
	if m := codeInText.FindStringSubmatch(err.Error()); m != nil {
		e.Code, e.Class = m[1], ClassOf(m[1])
	}
	return e
}

// classOfStatus classes an HTTP status; def is returned for statuses that say nothing more.
func classOfStatus(code int, def Class) Class {
	switch code {
	case http.StatusForbidden, http.StatusUnauthorized:
		return ClassForbidden
	case http.StatusNotFound:
		if def == ClassRefused {
			return ClassRefused
		}
		return ClassNotFound
	case http.StatusTooManyRequests, http.StatusRequestEntityTooLarge:
		return ClassCapReached
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return ClassUnavailable
	case http.StatusUnprocessableEntity, http.StatusConflict, http.StatusBadRequest:
		if def == ClassInternal {
			return ClassRefused
		}
	}
	return def
}

// CodeOf returns the refusal code carried by err, or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if w, ok := Wrap("", err).(*Error); ok {
		return w.Code
	}
	return ""
}

// ExitCodeOf returns the kubectl-workbench exit code for err (0 for nil).
func ExitCodeOf(err error) int {
	if err == nil {
		return 0
	}
	var ee interface{ ExitStatus() int }
	if errors.As(err, &ee) {
		return ee.ExitStatus()
	}
	var e *Error
	if !errors.As(err, &e) {
		w, _ := Wrap("", err).(*Error)
		e = w
	}
	return e.ExitCode()
}
