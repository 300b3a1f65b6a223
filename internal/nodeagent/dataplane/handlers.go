package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// signals is the closed list of signal names POST .../signal accepts.
var signals = map[string]syscall.Signal{
	"INT": syscall.SIGINT, "TERM": syscall.SIGTERM, "HUP": syscall.SIGHUP, "KILL": syscall.SIGKILL,
	"QUIT": syscall.SIGQUIT, "TSTP": syscall.SIGTSTP, "CONT": syscall.SIGCONT, "WINCH": syscall.SIGWINCH,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2,
}

// SignalNames returns the accepted signal names, sorted.
func SignalNames() []string {
	names := make([]string, 0, len(signals))
	for n := range signals {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// sessionHandle is a resolved session with its object facts.
type sessionHandle struct {
	s    Terminal
	info SessionInfo
}

// objRef is the namespace and name taken from the URL.
type objRef struct{ ns, name string }

func (o objRef) String() string { return o.ns + "/" + o.name }

type handlerFunc func(w http.ResponseWriter, r *http.Request, ref objRef) error

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range []struct {
		method, path, verb, resource, sub string
		h                                 handlerFunc
	}{
		{http.MethodGet, sessionPrefix + "screen", "get", "terminalsessions", "screen", s.screen},
		{http.MethodGet, sessionPrefix + "events", "get", "terminalsessions", "events", s.events},
		{http.MethodPost, sessionPrefix + "input", "create", "terminalsessions", "input", s.input},
		{http.MethodPost, sessionPrefix + "resize", "create", "terminalsessions", "resize", s.resize},
		{http.MethodPost, sessionPrefix + "signal", "create", "terminalsessions", "signal", s.signalWith(signals)},
		{http.MethodGet, envPrefix + "files/snapshot", "get", "environments", "files", s.snapshot},
		{http.MethodGet, envPrefix + "files/read", "get", "environments", "files", s.read},
	} {
		mux.Handle(rt.method+" "+rt.path, s.authorized(rt.verb, rt.resource, rt.sub, rt.h))
		allow := rt.method
		if allow == http.MethodGet {
			allow += ", " + http.MethodHead
		}
		mux.HandleFunc(rt.path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, r, errorf(http.StatusMethodNotAllowed, string(actuation.CodeMethodNotAllowed), "method "+r.Method+" is not allowed; use "+allow))
		})
	}
	s.v2Routes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, errorf(http.StatusNotFound, string(actuation.CodeNotFound), "no route for "+r.URL.Path))
	})
	return mux
}

// authorized validates the URL's namespace and name, asks the Authorizer for
// the route's virtual subresource and runs h.
func (s *Server) authorized(verb, resource, sub string, h handlerFunc) http.Handler {
	return s.authorizedIn("", verb, resource, sub, h)
}

// authorizedIn is authorized in an API group ("" = workbench.sensorium.dev); an empty verb
// leaves authorization to h (a route whose verb depends on the request).
func (s *Server) authorizedIn(group, verb, resource, sub string, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ref := objRef{ns: r.PathValue("ns"), name: r.PathValue("name")}
		if errs := validation.IsDNS1123Label(ref.ns); len(errs) > 0 {
			writeError(w, r, errorf(http.StatusBadRequest, string(actuation.CodeBadRequest), "namespace: "+strings.Join(errs, "; ")))
			return
		}
		if errs := validation.IsDNS1123Subdomain(ref.name); len(errs) > 0 {
			writeError(w, r, errorf(http.StatusBadRequest, string(actuation.CodeBadRequest), "name: "+strings.Join(errs, "; ")))
			return
		}
		if verb != "" {
			attrs := Attributes{Group: group, Verb: verb, Namespace: ref.ns, Resource: resource, Subresource: sub, Name: ref.name}
			if err := s.authorize(r, attrs); err != nil {
				writeError(w, r, err)
				return
			}
		}
		if err := h(w, r, ref); err != nil {
			writeError(w, r, err)
		}
	})
}

func badRequest(format string, args ...any) error {
	return errorf(http.StatusBadRequest, string(actuation.CodeBadRequest), fmt.Sprintf(format, args...))
}

// decode reads a bounded JSON body into v, refusing unknown fields and
// trailing data.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, s.lim.MaxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = terr
			if err == nil {
				err = errors.New("trailing data after the JSON object")
			}
		}
	}
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tooLarge):
		return errorf(http.StatusRequestEntityTooLarge, string(actuation.CodeBodyTooLarge), fmt.Sprintf("the body exceeds %d bytes", s.lim.MaxBodyBytes))
	default:
		return badRequest("decoding the body: %v", err)
	}
}

// queryUint parses an optional non-negative integer parameter.
func queryUint(q url.Values, key string, def, max uint64) (uint64, error) {
	v, ok := q[key]
	if !ok {
		return def, nil
	}
	if len(v) != 1 {
		return 0, badRequest("query parameter %s must be given once", key)
	}
	n, err := strconv.ParseUint(v[0], 10, 64)
	if err != nil || n > max {
		return 0, badRequest("query parameter %s=%q must be an integer in 0..%d", key, v[0], max)
	}
	return n, nil
}

// queryString returns an optional single-valued parameter.
func queryString(q url.Values, key string) (string, error) {
	v := q[key]
	switch len(v) {
	case 0:
		return "", nil
	case 1:
		return v[0], nil
	}
	return "", badRequest("query parameter %s must be given once", key)
}

func (s *Server) resolveSession(ref objRef) (sessionHandle, error) {
	sess, info, err := s.res.Session(ref.ns, ref.name)
	if err != nil {
		return sessionHandle{}, fmt.Errorf("resolving terminal session %s: %w", ref, err)
	}
	if sess == nil {
		return sessionHandle{}, fmt.Errorf("resolving terminal session %s: %w", ref, ErrNotFound)
	}
	return sessionHandle{sess, info}, nil
}

func (s *Server) screen(w http.ResponseWriter, _ *http.Request, ref objRef) error {
	h, err := s.resolveSession(ref)
	if err != nil {
		return err
	}
	snap := h.s.Screen()
	lines := snap.Lines
	if lines == nil {
		lines = []string{}
	}
	writeJSON(w, http.StatusOK, ScreenResponse{
		Rows: snap.Rows, Cols: snap.Cols, Lines: lines,
		Cursor:    Cursor{Row: snap.CursorRow, Col: snap.CursorCol, Hidden: snap.CursorHidden},
		AltScreen: snap.AltScreen, Seq: snap.Seq, Digest: snap.Digest,
		OutputDigest: snap.OutputDigest, OutputBytes: snap.OutputBytes,
		Phase: string(h.s.Phase()),
	})
	return nil
}

// events reads events after cursor. When none exist yet and waitSeconds > 0
// it parks on the session's ring (a long-poll slot and a session reader-task
// permit held) until an event arrives, the ring closes, the wait deadline
// passes or the request ends; then it reads again.
func (s *Server) events(w http.ResponseWriter, r *http.Request, ref objRef) error {
	q := r.URL.Query()
	cursor, err := queryUint(q, "cursor", 0, math.MaxUint64)
	if err != nil {
		return err
	}
	maxEvents, err := queryUint(q, "max", uint64(s.lim.MaxEventsPerRead), math.MaxInt32)
	if err != nil {
		return err
	}
	if maxEvents == 0 || maxEvents > uint64(s.lim.MaxEventsPerRead) {
		maxEvents = uint64(s.lim.MaxEventsPerRead)
	}
	waitSeconds, err := queryUint(q, "waitSeconds", 0, math.MaxInt32)
	if err != nil {
		return err
	}
	wait := min(time.Duration(waitSeconds)*time.Second, s.lim.MaxWait)

	h, err := s.resolveSession(ref)
	if err != nil {
		return err
	}
	rg := h.s.Events()
	if last := rg.LastSeq(); cursor > last {
		return badRequest("cursor %d is ahead of the last event %d", cursor, last)
	}
	evs, next, gap := h.s.Read(cursor, int(maxEvents))
	if len(evs) == 0 && gap == nil && wait > 0 {
		if err := s.park(r.Context(), h, ref, cursor, wait); err != nil {
			return err
		}
		evs, next, gap = h.s.Read(cursor, int(maxEvents))
	}
	st := rg.Stats()
	resp := EventsResponse{
		Events:  make([]Event, len(evs)),
		Next:    next,
		LastSeq: st.LastSeq,
		Closed:  st.Closed && next >= st.LastSeq,
		Phase:   string(h.s.Phase()),
	}
	for i, e := range evs {
		resp.Events[i] = Event{Seq: e.Seq, Time: e.Time, Kind: e.Kind, Data: e.Data, Bytes: e.Bytes}
	}
	if gap != nil {
		resp.Gap = &Gap{FromSeq: gap.FromSeq, ToSeq: gap.ToSeq}
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// park waits for an event after cursor without sleeping. A deadline, a
// closed ring or a finished request are normal ends of a long-poll.
func (s *Server) park(ctx context.Context, h sessionHandle, ref objRef, cursor uint64, wait time.Duration) error {
	release, err := s.acquireStream(ctx, ref.ns, false)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if s.waitHook != nil {
		s.waitHook()
	}
	err = h.s.WaitEvents(ctx, cursor)
	switch {
	case err == nil, errors.Is(err, ring.ErrClosed),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return nil
	}
	return fmt.Errorf("waiting for events of terminal session %s: %w", ref, err)
}

func (s *Server) input(w http.ResponseWriter, r *http.Request, ref objRef) error {
	var req InputRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	switch {
	case len(req.Data) == 0:
		return badRequest("data must not be empty")
	case len(req.Data) > s.lim.MaxInputBytes:
		return errorf(http.StatusRequestEntityTooLarge, string(actuation.CodeInputTooLarge),
			fmt.Sprintf("%d bytes of input exceed the per-request cap %d", len(req.Data), s.lim.MaxInputBytes))
	}
	h, err := s.resolveSession(ref)
	if err != nil {
		return err
	}
	if h.info.RawInput != wbv1.RawInputOperatorOnly {
		mode := h.info.RawInput
		if mode == "" {
			mode = wbv1.RawInputDisabled
		}
		return errorf(http.StatusForbidden, string(actuation.CodeRawInputDisabled),
			fmt.Sprintf("terminal session %s has spec.rawInput %s; raw input requires %s", ref, mode, wbv1.RawInputOperatorOnly))
	}
	if err := h.s.Input(req.Data); err != nil {
		return fmt.Errorf("input to terminal session %s: %w", ref, err)
	}
	writeJSON(w, http.StatusAccepted, InputResponse{QueuedBytes: len(req.Data)})
	return nil
}

func (s *Server) resize(w http.ResponseWriter, r *http.Request, ref objRef) error {
	var req ResizeRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	h, err := s.resolveSession(ref)
	if err != nil {
		return err
	}
	if err := h.s.Resize(req.Rows, req.Cols); err != nil {
		return fmt.Errorf("resizing terminal session %s: %w", ref, err)
	}
	writeJSON(w, http.StatusOK, req)
	return nil
}

// signalWith serves POST .../signal accepting the signal names of table (a closed set).
func (s *Server) signalWith(table map[string]syscall.Signal) handlerFunc {
	names := make([]string, 0, len(table))
	for n := range table {
		names = append(names, n)
	}
	sort.Strings(names)
	accepted := strings.Join(names, ", ")
	return func(w http.ResponseWriter, r *http.Request, ref objRef) error {
		var req SignalRequest
		if err := s.decode(w, r, &req); err != nil {
			return err
		}
		sig, ok := table[req.Signal]
		if !ok {
			return badRequest("signal %q is not one of %s", req.Signal, accepted)
		}
		h, err := s.resolveSession(ref)
		if err != nil {
			return err
		}
		if err := h.s.Signal(sig); err != nil {
			return fmt.Errorf("signalling terminal session %s: %w", ref, err)
		}
		writeJSON(w, http.StatusOK, req)
		return nil
	}
}

// fileQuery parses root and path; path is validated by the actuation core
// before any filesystem access.
func fileQuery(q url.Values, requireFile bool) (root, path string, err error) {
	if root, err = queryString(q, "root"); err != nil {
		return "", "", err
	}
	if errs := validation.IsDNS1123Label(root); len(errs) > 0 {
		return "", "", badRequest("query parameter root=%q: %s", root, strings.Join(errs, "; "))
	}
	if path, err = queryString(q, "path"); err != nil {
		return "", "", err
	}
	if rf := actuation.ValidateRelativePath(path, requireFile); rf != nil {
		return "", "", rf
	}
	return root, path, nil
}

func (s *Server) resolveRoot(ref objRef, root string) (Files, error) {
	rt, err := s.res.Root(ref.ns, ref.name, root)
	if err != nil {
		return nil, fmt.Errorf("resolving root %q of environment %s: %w", root, ref, err)
	}
	if rt == nil {
		return nil, fmt.Errorf("resolving root %q of environment %s: %w", root, ref, ErrNotFound)
	}
	return rt, nil
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request, ref objRef) error {
	root, path, err := fileQuery(r.URL.Query(), false)
	if err != nil {
		return err
	}
	rt, err := s.resolveRoot(ref, root)
	if err != nil {
		return err
	}
	snap, err := rt.Snapshot(r.Context(), path, s.lim.Snapshot)
	if err != nil {
		return fmt.Errorf("snapshot of %q in root %q of environment %s: %w", path, root, ref, err)
	}
	writeJSON(w, http.StatusOK, snap)
	return nil
}

func (s *Server) read(w http.ResponseWriter, r *http.Request, ref objRef) error {
	res, err := s.readRange(r, ref, "max")
	if err != nil {
		return err
	}
	data := res.Data
	if data == nil {
		data = []byte{}
	}
	writeJSON(w, http.StatusOK, ReadResponse{ReadResult: *res, Data: data})
	return nil
}

// readRange reads the file the query names (root, path, offset) up to the byte count in
// query parameter capParam, which defaults to and may not exceed the per-read cap.
func (s *Server) readRange(r *http.Request, ref objRef, capParam string) (*fsaccess.ReadResult, error) {
	q := r.URL.Query()
	root, path, err := fileQuery(q, true)
	if err != nil {
		return nil, err
	}
	offset, err := queryUint(q, "offset", 0, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	n, err := queryUint(q, capParam, uint64(s.lim.MaxReadBytes), math.MaxInt64)
	if err != nil {
		return nil, err
	}
	switch {
	case n == 0:
		n = uint64(s.lim.MaxReadBytes)
	case n > uint64(s.lim.MaxReadBytes):
		return nil, errorf(http.StatusBadRequest, string(actuation.CodeReadCapAboveMax),
			fmt.Sprintf("%s %d exceeds the per-read cap %d", capParam, n, s.lim.MaxReadBytes))
	}
	rt, err := s.resolveRoot(ref, root)
	if err != nil {
		return nil, err
	}
	res, err := rt.Read(r.Context(), path, int64(offset), int(n))
	if err != nil {
		return nil, fmt.Errorf("reading %q in root %q of environment %s: %w", path, root, ref, err)
	}
	return res, nil
}
