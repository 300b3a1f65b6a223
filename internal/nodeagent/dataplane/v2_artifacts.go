package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/dataplane/protocol/v2"
)

// ArtifactResolver opens the stored blob of an Artifact bound to this node.
type ArtifactResolver interface {
	// OpenArtifact returns the verified blob, its digest ("sha256:...") and size.
	OpenArtifact(ns, name string) (io.ReadCloser, string, int64, error)
	// ArtifactClassification returns the Artifact's spec.classification ("" for none).
	ArtifactClassification(ns, name string) (string, error)
}

// authorizeClassification asks, for an artifact whose classification needs more than the
// download route's "get" (actuation.ArtifactDownloadVerb: confidential, restricted, or a
// class the node does not know), whether the caller holds that virtual verb on
// artifacts/download; a caller without it is refused with artifact-classification-forbidden
// and reads nothing.
func (s *Server) authorizeClassification(r *http.Request, ref objRef) error {
	class, err := s.arts.ArtifactClassification(ref.ns, ref.name)
	if err != nil {
		return fmt.Errorf("reading the classification of artifact %s: %w", ref, err)
	}
	verb := actuation.ArtifactDownloadVerb(class)
	if verb == "" {
		return nil
	}
	err = s.authorize(r, Attributes{Group: protocol.SubresourceGroup, Verb: verb, Namespace: ref.ns, Resource: "artifacts", Subresource: "download", Name: ref.name})
	var he *httpError
	if errors.As(err, &he) && he.status == http.StatusForbidden {
		return errorf(http.StatusForbidden, string(actuation.CodeArtifactClassificationForbidden),
			fmt.Sprintf("artifact %s is classified %s: downloading it needs the verb %q on artifacts/download (%s)", ref, class, verb, he.message))
	}
	return err
}

// v2Download streams an artifact's blob with its digest and length.
func (s *Server) v2Download(w http.ResponseWriter, r *http.Request, ref objRef) error {
	if s.arts == nil {
		return fmt.Errorf("artifact %s: %w", ref, ErrNotFound)
	}
	if err := s.authorizeClassification(r, ref); err != nil {
		return err
	}
	rc, digest, size, err := s.arts.OpenArtifact(ref.ns, ref.name)
	if err != nil {
		return fmt.Errorf("opening artifact %s: %w", ref, err)
	}
	defer func() { _ = rc.Close() }()
	ctl := streamingResponse(w)
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Workbench-Digest", digest)
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := rc.Read(buf)
		if n > 0 {
			_ = ctl.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
			if _, err := w.Write(buf[:n]); err != nil {
				return nil
			}
		}
		if rerr != nil {
			return nil
		}
	}
}

// MaxUploadBytes caps one artifact upload (the node's artifact cap): a larger body is
// refused with 413 upload-too-large and nothing is stored.
const MaxUploadBytes = 64 << 20

// ArtifactUploader stores the uploaded blob of an Artifact with spec.source upload bound
// to this node and records its digest and size in the Artifact's status.
type ArtifactUploader interface {
	// UploadArtifact reads at most maxBytes from body (a refusal with code
	// upload-too-large above it). It refuses not-found (no such Artifact on this node),
	// invalid-spec (spec.source is not upload) and immutable (content already recorded, or
	// an upload in progress) with their codes.
	UploadArtifact(ctx context.Context, ns, name string, body io.Reader, maxBytes int64) (digest string, size int64, err error)
}

// v2Upload stores the request body as the blob of an upload Artifact.
func (s *Server) v2Upload(w http.ResponseWriter, r *http.Request, ref objRef) error {
	up, ok := s.arts.(ArtifactUploader)
	if !ok {
		return fmt.Errorf("artifact %s: uploads are not served by this node: %w", ref, ErrNotFound)
	}
	if r.ContentLength > MaxUploadBytes {
		return errorf(http.StatusRequestEntityTooLarge, string(actuation.CodeUploadTooLarge),
			fmt.Sprintf("the upload of %d bytes exceeds the cap of %d bytes", r.ContentLength, MaxUploadBytes))
	}
	streamingResponse(w) // a large body may take longer than the read timeout
	digest, size, err := up.UploadArtifact(r.Context(), ref.ns, ref.name, r.Body, MaxUploadBytes)
	if err != nil {
		switch code := string(actuation.CodeOf(err)); code {
		case string(actuation.CodeUploadTooLarge):
			return errorf(http.StatusRequestEntityTooLarge, code, fmt.Sprintf("the upload exceeds the cap of %d bytes", MaxUploadBytes))
		case string(actuation.CodeImmutable), string(actuation.CodeInvalidSpec):
			return &httpError{status: http.StatusConflict, code: code, message: err.Error()}
		}
		return fmt.Errorf("uploading artifact %s: %w", ref, err)
	}
	writeJSON(w, http.StatusOK, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusSuccess, Code: http.StatusOK,
		Message: fmt.Sprintf("artifact %s stored: %d bytes, %s", ref, size, digest),
		Details: &metav1.StatusDetails{Name: ref.name, Kind: "artifacts"}})
	return nil
}
