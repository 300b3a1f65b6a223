package sources

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// maxDockerConfigBytes bounds a dockerconfigjson Secret value.
const maxDockerConfigBytes = 1 << 20

// ParseOCIReference checks an OCI reference's shape: repository@sha256:<hex>, or
// repository:tag (a tag only as a convenience the node policy allows). It reports whether
// the reference is a digest.
func ParseOCIReference(ref string) (name.Reference, bool, error) {
	if ref == "" || len(ref) > 1024 || strings.ContainsAny(ref, " \t\r\n") {
		return nil, false, errf(string(actuation.CodeSourceInvalid), "oci reference must be 1..1024 bytes without spaces")
	}
	r, err := name.ParseReference(ref, name.StrictValidation)
	if err != nil {
		return nil, false, errf(string(actuation.CodeSourceInvalid), "oci reference %q: %v", ref, err)
	}
	_, isDigest := r.(name.Digest)
	return r, isDigest, nil
}

// DockerConfigAuth returns the registry credentials a kubernetes.io/dockerconfigjson
// value holds for registry (host[:port]); anonymous when it holds none for it.
func DockerConfigAuth(data []byte, registry string) (authn.Authenticator, error) {
	if len(data) > maxDockerConfigBytes {
		return nil, errf(string(actuation.CodeSourceCredentialsInvalid), ".dockerconfigjson is above %d bytes", maxDockerConfigBytes)
	}
	var cfg struct {
		Auths map[string]authn.AuthConfig `json:"auths"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, errf(string(actuation.CodeSourceCredentialsInvalid), ".dockerconfigjson is not a docker config (its content is not shown)")
	}
	for k, a := range cfg.Auths {
		host := strings.TrimPrefix(strings.TrimPrefix(k, "https://"), "http://")
		if i := strings.IndexByte(host, '/'); i >= 0 {
			host = host[:i]
		}
		if strings.EqualFold(host, registry) {
			return authn.FromConfig(a), nil
		}
	}
	return authn.Anonymous, nil
}

// policyTransport refuses every request (redirects included) to a host outside the
// policy, and plain HTTP where the policy does not allow it.
type policyTransport struct {
	pol      Policy
	registry string
	next     http.RoundTripper
}

func (p policyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	host := req.URL.Host
	if !strings.EqualFold(host, p.registry) && !p.pol.hostAllowed(host) {
		return nil, errf(string(actuation.CodeSourceHostNotAllowed), "request to %q (a redirect of registry %q) is outside the node's source allowlist", host, p.registry)
	}
	if req.URL.Scheme != "https" && !p.pol.plainHTTPAllowed(host) {
		return nil, errf(string(actuation.CodeSourceHostNotAllowed), "plain http to %q: allowed for loopback registries only", host)
	}
	return p.next.RoundTrip(req)
}

// OCI pulls OCI artifacts for the node agent.
type OCI struct {
	// Transport is the base transport (default: a clone of http.DefaultTransport).
	Transport http.RoundTripper
	// Timeout bounds one materialization (default 10 minutes).
	Timeout time.Duration
}

// MaterializeOCI pulls ref (by digest, or by tag when pol.AllowRefs) with auth and
// extracts its layers, in order, into dst under the archive rules (one Extractor across
// the layers: a name appearing in two layers is a duplicate; whiteouts are refused).
// Result.Resolved is the manifest digest.
func (o OCI) MaterializeOCI(ctx context.Context, ref string, auth authn.Authenticator, pol Policy, dst *fsaccess.Root, lim Limits) (Result, error) {
	r, isDigest, err := ParseOCIReference(ref)
	if err != nil {
		return Result{}, err
	}
	reg := r.Context().RegistryStr()
	if !pol.hostAllowed(reg) {
		return Result{}, errf(string(actuation.CodeSourceHostNotAllowed), "registry %q is outside the node's source allowlist", reg)
	}
	if !isDigest && !pol.AllowRefs {
		return Result{}, errf(string(actuation.CodeSourceRefNotAllowed), "oci reference %q names a tag: this node's policy takes digests only", ref)
	}
	if auth == nil {
		auth = authn.Anonymous
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	base := o.Transport
	if base == nil {
		base = http.DefaultTransport.(*http.Transport).Clone()
	}
	if pol.plainHTTPAllowed(reg) {
		// go-containerregistry picks http for loopback names itself; name.Insecure lets an
		// operator-allowed plain-HTTP registry work too. The transport still refuses plain
		// HTTP anywhere the policy does not allow it.
		if r, _, err = reparseInsecure(ref); err != nil {
			return Result{}, err
		}
	}
	start := time.Now()
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuth(auth),
		remote.WithTransport(policyTransport{pol: pol, registry: reg, next: base}), remote.WithRetryBackoff(remote.Backoff{Steps: 1}))
	if err != nil {
		return Result{}, ociErr(err, "fetch the manifest of %s", ref)
	}
	digest, err := img.Digest()
	if err != nil {
		return Result{}, ociErr(err, "digest of %s", ref)
	}
	if d, ok := r.(name.Digest); ok && d.DigestStr() != digest.String() {
		return Result{}, errf(string(actuation.CodeSourceFetchFailed), "%s: the registry served manifest %s", ref, digest)
	}
	layers, err := img.Layers()
	if err != nil {
		return Result{}, ociErr(err, "layers of %s", ref)
	}
	if len(layers) > MaxLayers {
		return Result{}, errf(string(actuation.CodeArchiveTooManyEntries), "%s has %d layers, at most %d", ref, len(layers), MaxLayers)
	}
	res := Result{Resolved: digest.String(), FetchMillis: time.Since(start).Milliseconds()}
	start = time.Now()
	x := NewExtractor(dst, lim)
	for i, l := range layers {
		if err := extractLayer(x, l); err != nil {
			res.Entries, res.Bytes = x.Entries(), x.Bytes()
			return res, fmt.Errorf("layer %d of %s: %w", i, ref, err)
		}
	}
	err = x.Finish()
	res.Entries, res.Bytes = x.Entries(), x.Bytes()
	res.MaterializeMillis = time.Since(start).Milliseconds()
	return res, err
}

func reparseInsecure(ref string) (name.Reference, bool, error) {
	r, err := name.ParseReference(ref, name.StrictValidation, name.Insecure)
	if err != nil {
		return nil, false, errf(string(actuation.CodeSourceInvalid), "oci reference %q: %v", ref, err)
	}
	_, isDigest := r.(name.Digest)
	return r, isDigest, nil
}

// extractLayer extracts one layer's uncompressed tar (its compressed digest verified by
// go-containerregistry as it is read).
func extractLayer(x *Extractor, l v1.Layer) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return ociErr(err, "open layer")
	}
	defer func() { _ = rc.Close() }()
	return x.ExtractTar(rc, false)
}

// ociErr keeps a refusal's code (the transport's host-not-allowed) and classifies the
// rest: a missing manifest is commit-not-found's OCI twin (no such digest or tag),
// everything else fetch-failed.
func ociErr(err error, format string, args ...any) error {
	if c := string(actuation.CodeOf(err)); c != "" {
		return err
	}
	msg := err.Error()
	if strings.Contains(msg, "MANIFEST_UNKNOWN") || strings.Contains(msg, "NAME_UNKNOWN") || strings.Contains(msg, "404") {
		return wrapf(string(actuation.CodeSourceCommitNotFound), err, format, args...)
	}
	return wrapf(string(actuation.CodeSourceFetchFailed), err, format, args...)
}
