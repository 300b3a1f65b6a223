// Package artifactout collects the files an action produces as artifacts
// (seed 002, class C5 artifact-producing-spawn).
//
// The program writes its artifacts into a directory of its sandbox (the
// agent names it in the program's environment). That directory is a
// writecap area: a tmpfs sized to the declared total byte cap and holding at
// most the declared count, with the per-artifact cap as the program's
// RLIMIT_FSIZE, so the kernel stops an oversized write while it happens
// (ENOSPC, EFBIG). After the run, Collect checks every file (regular files
// only, count, sizes) and sniffs its media type from its content (never from
// its name) with github.com/gabriel-vasile/mimetype; a type outside the
// declared list refuses the whole set. Promote then stores each file in the
// node's content-addressed blob store, whose digest becomes the Artifact.
//
// No Kubernetes types are used here.
package artifactout

import (
	"fmt"
	"io"
	"strings"

	"github.com/gabriel-vasile/mimetype"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/platform/writecap"
)

// Caps.
const (
	MaxCount      = 256
	MaxMediaTypes = 32
	// sniffBytes is how much of a file the media type is read from
	// (mimetype's own default read limit).
	sniffBytes = 3072
)

// Policy is a C5 envelope.
type Policy struct {
	MaxCount          int
	MaxBytesPer       int64
	MaxBytesTotal     int64
	AllowedMediaTypes []string // "type/subtype" (parameters ignored), or "type/*"
}

// Artifact is one produced file.
type Artifact struct {
	Path      string `json:"path"` // relative to the artifact directory
	Size      int64  `json:"size"`
	SHA256    string `json:"sha256"` // sha256:<hex>, the blob store's key after Promote
	MediaType string `json:"mediaType"`
}

// Result is what Collect found.
type Result struct {
	Artifacts  []Artifact `json:"artifacts"`
	BytesTotal int64      `json:"bytesTotal"`
	Code       string     `json:"code,omitempty"`
	Path       string     `json:"path,omitempty"`
	Message    string     `json:"message,omitempty"`
}

// Area is one artifact directory.
type Area struct {
	policy Policy
	area   *writecap.Area
}

// Validate checks a C5 envelope (refusal.InvalidSpec).
func Validate(p Policy) error {
	switch {
	case p.MaxCount <= 0 || p.MaxCount > MaxCount:
		return actuation.Refusef(actuation.CodeInvalidSpec, "artifact caps: count %d must be in 1..%d", p.MaxCount, MaxCount)
	case len(p.AllowedMediaTypes) == 0 || len(p.AllowedMediaTypes) > MaxMediaTypes:
		return actuation.Refusef(actuation.CodeInvalidSpec, "artifact caps: %d media types (want 1..%d)", len(p.AllowedMediaTypes), MaxMediaTypes)
	}
	for _, m := range p.AllowedMediaTypes {
		t, s, ok := strings.Cut(m, "/")
		if !ok || t == "" || s == "" || t == "*" || strings.ContainsAny(m, " ;,") {
			return actuation.Refusef(actuation.CodeInvalidSpec, "artifact caps: media type %q must be type/subtype or type/*", m)
		}
	}
	return writecap.Validate(writecap.Policy{MaxBytesTotal: p.MaxBytesTotal, MaxBytesPerFile: p.MaxBytesPer, MaxFiles: p.MaxCount})
}

// Prepare mounts an artifact area under base.
func Prepare(base string, p Policy) (*Area, error) {
	if err := Validate(p); err != nil {
		return nil, err
	}
	a, err := writecap.Prepare(base, writecap.Policy{MaxBytesTotal: p.MaxBytesTotal, MaxBytesPerFile: p.MaxBytesPer, MaxFiles: p.MaxCount})
	if err != nil {
		return nil, err
	}
	return &Area{policy: p, area: a}, nil
}

// Mount attaches the area at target inside the sandbox.
func (a *Area) Mount(target string) procexec.Mount { return a.area.Mount(target) }

// FileSizeLimit is the program's RLIMIT_FSIZE for this area.
func (a *Area) FileSizeLimit() int64 { return a.area.FileSizeLimit() }

// Close unmounts and removes the area.
func (a *Area) Close() error { return a.area.Close() }

// Allowed reports whether the sniffed media type m is in the declared list.
func (p Policy) Allowed(m *mimetype.MIME) bool {
	for _, want := range p.AllowedMediaTypes {
		if t, ok := strings.CutSuffix(want, "/*"); ok {
			base, _, _ := strings.Cut(m.String(), ";")
			if strings.EqualFold(strings.SplitN(base, "/", 2)[0], t) {
				return true
			}
			continue
		}
		if m.Is(want) {
			return true
		}
	}
	return false
}

// Collect checks the produced files and sniffs their media types.
func (a *Area) Collect() (Result, error) {
	wr, err := a.area.Collect()
	res := Result{BytesTotal: wr.BytesTotal}
	if err != nil {
		return res, err
	}
	switch wr.Code {
	case "":
	case string(actuation.CodeWriteFileCapReached):
		res.Code, res.Path, res.Message = string(actuation.CodeArtifactSizeCapReached), wr.Path, fmt.Sprintf("%s reached the per-artifact cap of %d bytes", wr.Path, a.policy.MaxBytesPer)
	case string(actuation.CodeWriteTotalCapReached):
		res.Code, res.Message = string(actuation.CodeArtifactTotalCapReached), fmt.Sprintf("the artifacts reached their total cap of %d bytes", a.policy.MaxBytesTotal)
	case string(actuation.CodeWriteFileCountCapReached):
		res.Code, res.Message = string(actuation.CodeArtifactCountCapReached), fmt.Sprintf("more than %d artifacts", a.policy.MaxCount)
	default:
		res.Code, res.Path, res.Message = wr.Code, wr.Path, wr.Message
	}
	if res.Code == "" && len(wr.Files) > a.policy.MaxCount {
		res.Code, res.Message = string(actuation.CodeArtifactCountCapReached), fmt.Sprintf("%d artifacts, at most %d", len(wr.Files), a.policy.MaxCount)
	}
	root, err := fsaccess.OpenRoot(a.area.Dir())
	if err != nil {
		return res, fmt.Errorf("artifactout: open %s: %w", a.area.Dir(), err)
	}
	defer func() { _ = root.Close() }()
	for _, f := range wr.Files {
		m, err := sniff(root, f.Path)
		if err != nil {
			return res, err
		}
		base, _, _ := strings.Cut(m.String(), ";")
		res.Artifacts = append(res.Artifacts, Artifact{Path: f.Path, Size: f.Size, SHA256: f.SHA256, MediaType: base})
		if res.Code == "" && !a.policy.Allowed(m) {
			res.Code, res.Path = string(actuation.CodeArtifactMediaTypeForbidden), f.Path
			res.Message = fmt.Sprintf("%s is %s, not one of the declared media types %v", f.Path, base, a.policy.AllowedMediaTypes)
		}
	}
	return res, nil
}

func sniff(root *fsaccess.Root, rel string) (*mimetype.MIME, error) {
	f, _, err := root.OpenRead(rel)
	if err != nil {
		return nil, fmt.Errorf("artifactout: open %s: %w", rel, err)
	}
	defer func() { _ = f.Close() }()
	m, err := mimetype.DetectReader(io.LimitReader(f, sniffBytes))
	if err != nil {
		return nil, fmt.Errorf("artifactout: sniff %s: %w", rel, err)
	}
	return m, nil
}

// Store is where artifacts are promoted (the node's blob store).
type Store interface {
	PutExpect(r io.Reader, maxBytes int64, wantDigest string, wantSize int64) (string, int64, error)
}

// Promote stores every collected artifact (digest and size checked again
// on the way in). It refuses with res.Code when Collect found a cap reached
// or a type not declared: nothing is promoted then.
func (a *Area) Promote(res Result, store Store) error {
	if res.Code != "" {
		return actuation.Refusef(actuation.Code(res.Code), "artifactout: nothing promoted: %s", res.Message)
	}
	root, err := fsaccess.OpenRoot(a.area.Dir())
	if err != nil {
		return fmt.Errorf("artifactout: open %s: %w", a.area.Dir(), err)
	}
	defer func() { _ = root.Close() }()
	for _, art := range res.Artifacts {
		f, _, err := root.OpenRead(art.Path)
		if err != nil {
			return fmt.Errorf("artifactout: open %s: %w", art.Path, err)
		}
		_, _, err = store.PutExpect(f, a.policy.MaxBytesPer, art.SHA256, art.Size)
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("artifactout: promote %s: %w", art.Path, err)
		}
	}
	return nil
}
