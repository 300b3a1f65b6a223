package dataplane

import (
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

	"k8s.io/apimachinery/pkg/util/validation"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// sessionHandle is a resolved session with its object facts.
type sessionHandle struct {
	s    Terminal
	info SessionInfo
}

// objRef is the namespace and name taken from the URL.
type objRef struct{ ns, name string }

func (o objRef) String() string { return o.ns + "/" + o.name }

type handlerFunc func(w http.ResponseWriter, r *http.Request, ref objRef) error

// routes serves the v2 routes (v2.go) and answers anything else with not-found.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	s.v2Routes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, errorf(http.StatusNotFound, string(actuation.CodeNotFound), "no route for "+r.URL.Path))
	})
	return mux
}

// authorizedIn validates the URL's namespace and name, asks the Authorizer for the
// route's virtual subresource in an API group and runs h; an empty verb leaves
// authorization to h (a route whose verb depends on the request).
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
