package environments

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/sources"
)

// SourcesConfig is the node operator's workspace-source policy (issue 28, docs/workspace-
// sources.md). The cluster never widens it: an Environment's git or OCI source outside
// AllowedHosts is refused with source-host-not-allowed.
type SourcesConfig struct {
	// AllowedHosts are the hosts (host or host:port; "*.example.org" for subdomains) git
	// and OCI sources may be fetched from, by the agent, never by a sandbox.
	AllowedHosts []string `json:"allowedHosts,omitempty"`
	// AllowedFileDirs are the node directories a file:// git URL may lie in.
	AllowedFileDirs []string `json:"allowedFileDirs,omitempty"`
	// AllowRefs lets a git source name a branch or tag and an OCI source a tag (resolved to
	// the commit or digest recorded in status.roots).
	AllowRefs bool `json:"allowRefs,omitempty"`
	// AllowPlainHTTP allows http:// git and plain-HTTP registries beyond loopback hosts.
	AllowPlainHTTP bool `json:"allowPlainHTTP,omitempty"`
	// MaxEntries, MaxMiB and MaxFileMiB bound one materialized root (defaults: the
	// sources package's); an Environment's resources.diskMiB lowers MaxMiB further.
	MaxEntries int64 `json:"maxEntries,omitempty"`
	MaxMiB     int64 `json:"maxMiB,omitempty"`
	MaxFileMiB int64 `json:"maxFileMiB,omitempty"`
	// MaxFetchMiB bounds what one git fetch downloads into .git (default 1024):
	// source-fetch-too-large above it.
	MaxFetchMiB int64 `json:"maxFetchMiB,omitempty"`
	// TimeoutSeconds bounds one fetch (default 600).
	TimeoutSeconds int `json:"timeoutSeconds,omitempty"`
}

func (a *Room) sourcePolicy() (sources.Policy, sources.Limits, time.Duration) {
	c := SourcesConfig{}
	if a.d.Sources != nil {
		c = *a.d.Sources
	}
	pol := sources.Policy{AllowedHosts: c.AllowedHosts, AllowedFileDirs: c.AllowedFileDirs, AllowRefs: c.AllowRefs, AllowPlainHTTP: c.AllowPlainHTTP}
	lim := sources.Limits{MaxEntries: c.MaxEntries, MaxBytes: c.MaxMiB << 20, MaxFileBytes: c.MaxFileMiB << 20, MaxFetchBytes: c.MaxFetchMiB << 20}
	timeout := time.Duration(c.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	return pol, lim, timeout
}

// sourceOutcomes collects what this pass materialized, per root (status.roots).
type sourceOutcomes struct {
	mu    sync.Mutex
	roots map[string]wbv1.RootSourceStatus
}

func (o *sourceOutcomes) put(s wbv1.RootSourceStatus) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.roots[string(s.Name)] = s
}

// mergeSources returns status.roots: this pass's outcome for a root it materialized; for
// one whose complete copy was reused, what this process recorded when it materialized it
// (the cached status may not show that write yet), else the status's own entry (after an
// agent restart); a bare entry for the rest.
func (a *Room) mergeSources(o *sourceOutcomes, env *wbv1.Environment) []wbv1.RootSourceStatus {
	if o == nil {
		return env.Status.Roots
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	old := map[wbv1.RootName]wbv1.RootSourceStatus{}
	for _, p := range env.Status.Roots {
		old[p.Name] = p
	}
	var out []wbv1.RootSourceStatus
	for _, r := range env.Spec.Roots {
		kind := sourceKind(r)
		if kind == "" {
			continue
		}
		key := string(env.UID) + "/" + string(r.Name)
		s, ok := o.roots[string(r.Name)]
		switch {
		case ok && s.Reason == "":
			a.materialized.Store(key, s)
		case ok:
			a.materialized.Delete(key)
		default:
			if m, found := a.materialized.Load(key); found {
				s = m.(wbv1.RootSourceStatus)
			} else if s, ok = old[r.Name]; !ok || s.Reason != "" {
				s = wbv1.RootSourceStatus{Name: r.Name, Kind: kind}
			}
		}
		out = append(out, s)
	}
	return out
}

// forgetMaterialized drops what mergeSources remembered of an environment's roots.
func (a *Room) forgetMaterialized(envUID string) {
	a.materialized.Range(func(k, _ any) bool {
		if strings.HasPrefix(k.(string), envUID+"/") {
			a.materialized.Delete(k)
		}
		return true
	})
}

func sourceKind(r wbv1.EnvironmentRoot) string {
	switch {
	case r.Git != nil:
		return "git"
	case r.Archive != nil:
		return "archive"
	case r.OCI != nil:
		return "oci"
	}
	return ""
}

// sourceBackendsHint names the backends of this node that materialize sources, for the
// refusal of a sourced root on one that does not: " (use fixture-copy.v1 or
// qemu-microvm.v1)", "" when none does.
func (a *Room) sourceBackendsHint() string {
	ids := a.d.Backends.SourceMaterializers()
	if len(ids) == 0 {
		return ""
	}
	return " (use " + strings.Join(ids, " or ") + ")"
}

// sourceID is a sourced root's identity: its kind and a digest of its declaration (and,
// for an archive, of the blob it names). A complete copy of the same identity is reused.
func sourceID(kind string, decl any, extra string) string {
	b, _ := json.Marshal(decl)
	h := sha256.Sum256(append(b, extra...))
	return kind + ":" + hex.EncodeToString(h[:16])
}

// bindSources binds every sourced root of env into spec (Materialize and SourceID). It
// returns a refusal (code, message) when a source cannot be used at all — a backend b that
// does not materialize sources (b's own answer, backends.MaterializesSources), a
// credentials Secret or an Artifact that is not usable — before anything is fetched. Credentials are read here, by the agent, and stay in the
// closures: never in the spec's record, a status, an event or a log.
func (a *Room) bindSources(ctx context.Context, env *wbv1.Environment, b backends.Backend, spec *backends.Spec) (*sourceOutcomes, string, string, error) {
	var out *sourceOutcomes
	pol, lim, timeout := a.sourcePolicy()
	if d := env.Spec.Resources; d != nil && d.DiskMiB != nil && *d.DiskMiB > 0 {
		if disk := int64(*d.DiskMiB) << 20; lim.MaxBytes <= 0 || disk < lim.MaxBytes {
			lim.MaxBytes = disk
		}
	}
	for i, r := range env.Spec.Roots {
		kind := sourceKind(r)
		if kind == "" {
			continue
		}
		if out == nil {
			out = &sourceOutcomes{roots: map[string]wbv1.RootSourceStatus{}}
		}
		field := fmt.Sprintf("spec.roots[%d].%s", i, kind)
		if !backends.MaterializesSources(b) { // the backend answers (backends.SourceMaterializer)
			return out, string(actuation.CodeSourceBackendUnsupported), fmt.Sprintf("%s: backend %s does not materialize sources%s", field, b.ID(), a.sourceBackendsHint()), nil
		}
		name := string(r.Name)
		var m backends.MaterializeFunc
		var id string
		switch kind {
		case "git":
			src, err := a.gitSource(ctx, env, r.Git)
			if err != nil {
				c, msg, err := refusalOf(err)
				return out, c, msg, err
			}
			id = sourceID(kind, r.Git, "")
			scratch := filepath.Join(a.d.StateDir, "sources-scratch")
			if err := sweepScratchOnce(scratch); err != nil {
				return out, "", "", err
			}
			git := sources.Git{Scratch: scratch, Timeout: timeout}
			m = func(ctx context.Context, _ *fsaccess.Root, dir string) (int, int, int64, error) {
				res, err := git.MaterializeGit(ctx, src, pol, dir, lim)
				return out.record(name, kind, res, err)
			}
		case "oci":
			auth, err := a.ociAuth(ctx, env, r.OCI)
			if err != nil {
				c, msg, err := refusalOf(err)
				return out, c, msg, err
			}
			id = sourceID(kind, r.OCI, "")
			ref := r.OCI.Ref
			m = func(ctx context.Context, st *fsaccess.Root, _ string) (int, int, int64, error) {
				res, err := sources.OCI{Timeout: timeout}.MaterializeOCI(ctx, ref, auth, pol, st, lim)
				return out.record(name, kind, res, err)
			}
		case "archive":
			digest, err := a.archiveBlob(ctx, env, r.Archive)
			if err != nil {
				c, msg, err := refusalOf(err)
				return out, c, msg, err
			}
			id = sourceID(kind, r.Archive, digest)
			format := string(r.Archive.Format)
			m = func(ctx context.Context, st *fsaccess.Root, _ string) (int, int, int64, error) {
				start := time.Now()
				blob, err := a.d.Blobs.Open(digest) // re-hashed: a blob that changed is artifact-corrupt
				if err != nil {
					return out.record(name, kind, sources.Result{}, actuation.Wrapf(actuation.CodeSourceArtifactUnavailable, err, "archive %s", digest))
				}
				defer func() { _ = blob.Close() }()
				fetch := time.Since(start).Milliseconds()
				start = time.Now()
				res, err := sources.Extract(blob.File, blob.Size, format, st, lim)
				res.Resolved, res.FetchMillis, res.MaterializeMillis = digest, fetch, time.Since(start).Milliseconds()
				return out.record(name, kind, res, err)
			}
		}
		spec.Roots[i].SourceID, spec.Roots[i].Materialize = id, m
	}
	return out, "", "", nil
}

// record keeps one root's outcome for status.roots and passes the error through.
func (o *sourceOutcomes) record(name, kind string, res sources.Result, err error) (int, int, int64, error) {
	s := wbv1.RootSourceStatus{Name: wbv1.RootName(name), Kind: kind, Resolved: res.Resolved, Bytes: res.Bytes, Entries: res.Entries,
		FetchMillis: res.FetchMillis, MaterializeMillis: res.MaterializeMillis}
	if err != nil {
		s.Reason = string(actuation.CodeOf(err))
		if s.Reason == "" {
			s.Reason = string(actuation.CodeSourceFetchFailed)
			err = actuation.Wrapf(actuation.Code(s.Reason), err, "root %q", name)
		}
	}
	o.put(s)
	return int(res.Entries), 0, res.Bytes, err
}

// failRoot records a refusal found before any fetch for status.roots.
func (o *sourceOutcomes) failRoot(env *wbv1.Environment, code string) {
	if o == nil {
		return
	}
	for _, r := range env.Spec.Roots {
		if k := sourceKind(r); k != "" {
			if _, done := o.roots[string(r.Name)]; !done {
				o.put(wbv1.RootSourceStatus{Name: r.Name, Kind: k, Reason: code})
				return
			}
		}
	}
}

// refusalOf splits an error into a refusal (a coded error) or a transient error.
func refusalOf(err error) (string, string, error) {
	if c := string(actuation.CodeOf(err)); c != "" {
		return c, err.Error(), nil
	}
	return "", "", err
}

// sourceSecret reads the credentials Secret ref names in env's namespace, straight from the
// API server (the agent caches and lists no Secret: it may only get one, config/rbac). A
// Secret without the opt-in label SourceCredentialsLabel=true is refused.
func (a *Room) sourceSecret(ctx context.Context, env *wbv1.Environment, ref *wbv1.SecretKeyReference) (*corev1.Secret, error) {
	var s corev1.Secret
	key := types.NamespacedName{Namespace: env.Namespace, Name: string(ref.Name)}
	if err := a.d.Reader.Get(ctx, key, &s); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return nil, actuation.Refusef(actuation.CodeSourceCredentialsInvalid, "Secret %s cannot be read by node %s", key, a.d.NodeName)
		}
		return nil, err
	}
	if s.Labels[wbv1.SourceCredentialsLabel] != "true" {
		return nil, actuation.Refusef(actuation.CodeSourceCredentialsInvalid, "Secret %s is not labelled %s=true: the node reads only Secrets opted in as source credentials", key, wbv1.SourceCredentialsLabel)
	}
	return &s, nil
}

func (a *Room) gitSource(ctx context.Context, env *wbv1.Environment, g *wbv1.GitRootSource) (sources.GitSource, error) {
	src := sources.GitSource{URL: g.URL, Commit: ptr.Deref(g.Commit, ""), Ref: ptr.Deref(g.Ref, ""), Depth: int(ptr.Deref(g.Depth, 0)), Submodules: g.Submodules == wbv1.GitSubmodulesFetch, LFS: g.LFS == wbv1.GitLFSFetch}
	for _, p := range g.SparsePaths {
		src.SparsePaths = append(src.SparsePaths, string(p))
	}
	if _, err := sources.ValidateGitSource(src); err != nil {
		return src, err
	}
	if g.CredentialsSecretRef == nil {
		return src, nil
	}
	s, err := a.sourceSecret(ctx, env, g.CredentialsSecretRef)
	if err != nil {
		return src, err
	}
	src.Credentials = sources.GitCredentials{Token: string(s.Data["token"]), SSHPrivateKey: s.Data["ssh-privatekey"], KnownHosts: s.Data["known_hosts"]}
	if src.Credentials.Token == "" && len(src.Credentials.SSHPrivateKey) == 0 {
		return src, actuation.Refusef(actuation.CodeSourceCredentialsInvalid, "Secret %s/%s has neither token nor ssh-privatekey", env.Namespace, g.CredentialsSecretRef.Name)
	}
	return src, nil
}

func (a *Room) ociAuth(ctx context.Context, env *wbv1.Environment, o *wbv1.OCIRootSource) (authn.Authenticator, error) {
	r, _, err := sources.ParseOCIReference(o.Ref)
	if err != nil {
		return nil, err
	}
	if o.CredentialsSecretRef == nil {
		return authn.Anonymous, nil
	}
	s, err := a.sourceSecret(ctx, env, o.CredentialsSecretRef)
	if err != nil {
		return nil, err
	}
	data, ok := s.Data[corev1.DockerConfigJsonKey]
	if s.Type != corev1.SecretTypeDockerConfigJson || !ok {
		return nil, actuation.Refusef(actuation.CodeSourceCredentialsInvalid, "Secret %s/%s is not of type %s", env.Namespace, s.Name, corev1.SecretTypeDockerConfigJson)
	}
	return sources.DockerConfigAuth(data, r.Context().RegistryStr())
}

// archiveBlob resolves an archive source to the digest of a complete Artifact stored on this
// node. An Artifact on another node is refused (source-artifact-unavailable): the blob never
// leaves its node; the Environment is placed there with a nodeSelector on
// workbench.sensorium.dev/node (docs/workspace-sources.md).
func (a *Room) archiveBlob(ctx context.Context, env *wbv1.Environment, src *wbv1.ArchiveRootSource) (string, error) {
	code := string(actuation.CodeSourceArtifactUnavailable)
	var art wbv1.Artifact
	key := types.NamespacedName{Namespace: env.Namespace, Name: string(src.ArtifactRef)}
	err := a.d.Client.Get(ctx, key, &art)
	if apierrors.IsNotFound(err) {
		err = a.d.Reader.Get(ctx, key, &art)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", actuation.Refusef(actuation.Code(code), "Artifact %s does not exist", key)
		}
		return "", err
	}
	switch {
	case art.Status.Digest == "":
		return "", actuation.Refusef(actuation.Code(code), "Artifact %s holds no content yet", key)
	case art.Status.NodeName != a.d.NodeName:
		return "", actuation.Refusef(actuation.Code(code), "Artifact %s is stored on node %q, not on %q: place the Environment on its node (nodeSelector %s)", key, art.Status.NodeName, a.d.NodeName, wbv1.NodeLabel)
	case src.Digest != nil && *src.Digest != art.Status.Digest:
		return "", actuation.Refusef(actuation.Code(code), "Artifact %s holds %s, not the pinned %s", key, art.Status.Digest, *src.Digest)
	}
	if _, err := a.d.Blobs.Stat(string(art.Status.Digest)); err != nil {
		return "", actuation.Wrapf(actuation.Code(code), err, "Artifact %s's blob on node %s", key, a.d.NodeName)
	}
	return string(art.Status.Digest), nil
}

// sourceErr leads an allocation error of a sourced environment with its refusal code, as a
// condition message shows it (archive-path-traversal: ...).
func sourceErr(err error) error {
	if c := string(actuation.CodeOf(err)); err != nil && c != "" && !strings.HasPrefix(err.Error(), c) {
		return actuation.Wrapf(actuation.Code(c), err, "materializing a sourced root")
	}
	return err
}

// sweptScratch records the git scratch directories this process has swept.
var sweptScratch = struct {
	sync.Mutex
	dirs map[string]bool
}{dirs: map[string]bool{}}

// sweepScratchOnce removes, once per process and before its first fetch, what fetches of a
// previous process left when it died mid-fetch: its git helpers still running in the state
// directory (killed) and its scratch (an empty HOME, and for ssh a private key and
// known_hosts: never left behind on the node).
func sweepScratchOnce(dir string) error {
	sweptScratch.Lock()
	defer sweptScratch.Unlock()
	if sweptScratch.dirs[dir] {
		return nil
	}
	if err := sources.SweepScratch(dir, filepath.Dir(dir)); err != nil {
		return fmt.Errorf("sweep the git scratch directory %s: %w", dir, err)
	}
	sweptScratch.dirs[dir] = true
	return nil
}
