package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// Sources is a root materialized by the node from a git commit, an uploaded archive or an
// OCI artifact (issue 28; docs/workspace-sources.md). The CLI's flags and the MCP tool's
// input are both this type. At most one of Git, Archive and OCI is set.
type Sources struct {
	// SourceRoot is the root the source fills.
	SourceRoot string `json:"sourceRoot,omitempty" jsonschema:"name of the root the source is materialized into (default repo)"`
	// Git is URL@COMMIT (a full commit id), or the URL alone with GitRef.
	Git       string   `json:"git,omitempty" jsonschema:"git source as URL@COMMIT with a full 40- or 64-hex commit id, or the URL alone with gitRef"`
	GitRef    string   `json:"gitRef,omitempty" jsonschema:"branch or tag resolved by the node to a commit recorded in status (node policy must allow refs)"`
	Sparse    []string `json:"sparse,omitempty" jsonschema:"root-relative directories the checkout is restricted to"`
	Depth     int32    `json:"depth,omitempty" jsonschema:"history depth fetched (default 1: the commit alone)"`
	GitSecret string   `json:"gitSecret,omitempty" jsonschema:"Secret holding token (HTTPS) or ssh-privatekey and known_hosts (SSH)"`
	// Archive is the name of an upload Artifact holding a tar, tar.gz or zip.
	Archive       string `json:"archive,omitempty" jsonschema:"name of an upload Artifact holding a tar, tar+gzip or zip archive"`
	ArchiveFormat string `json:"archiveFormat,omitempty" jsonschema:"archive format: tar, tar+gzip or zip (default from the artifact name's extension, else tar+gzip)"`
	ArchiveDigest string `json:"archiveDigest,omitempty" jsonschema:"sha256:<hex> the archive must hash to"`
	// OCI is repository@sha256:<digest> or repository:tag.
	OCI       string `json:"oci,omitempty" jsonschema:"OCI artifact as repository@sha256:<digest> (or repository:tag, resolved to a digest recorded in status)"`
	OCISecret string `json:"ociSecret,omitempty" jsonschema:"Secret of type kubernetes.io/dockerconfigjson for the registry"`
}

// DefaultSourceRoot is the root a source fills when SourceRoot is empty.
const DefaultSourceRoot = "repo"

var (
	commitRE = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)
	digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// SplitGitSource splits URL@COMMIT at its last "@" (an ssh:// URL has one of its own).
func SplitGitSource(s string) (url, commit string, err error) {
	i := strings.LastIndex(s, "@")
	if i <= 0 || !commitRE.MatchString(s[i+1:]) {
		return "", "", Usage("git source %q must be URL@COMMIT with a full 40- or 64-hex commit id (a branch or tag goes in gitRef, --git-ref on the command line)", s)
	}
	return s[:i], s[i+1:], nil
}

// ArchiveFormatOf is the archive format a file or artifact name implies ("" when none).
func ArchiveFormatOf(name string) wbv1.ArchiveFormat {
	n := strings.ToLower(name)
	switch {
	case strings.HasSuffix(n, ".tar.gz"), strings.HasSuffix(n, ".tgz"):
		return wbv1.ArchiveFormatTarGzip
	case strings.HasSuffix(n, ".tar"):
		return wbv1.ArchiveFormatTar
	case strings.HasSuffix(n, ".zip"):
		return wbv1.ArchiveFormatZip
	}
	return ""
}

// root builds the sourced root, or nil when no source is set.
func (s Sources) root() (*wbv1.EnvironmentRoot, error) {
	n := 0
	for _, v := range []string{s.Git, s.Archive, s.OCI} {
		if v != "" {
			n++
		}
	}
	gitOnly := s.GitRef != "" || len(s.Sparse) > 0 || s.Depth != 0 || s.GitSecret != ""
	switch {
	case n > 1:
		return nil, Usage("an environment takes at most one source: git, archive or oci")
	case n == 0 && (gitOnly || s.ArchiveFormat != "" || s.ArchiveDigest != "" || s.OCISecret != "" || s.SourceRoot != ""):
		return nil, Usage("source options without a source (git, archive or oci)")
	case n == 0:
		return nil, nil
	case s.Git == "" && gitOnly:
		return nil, Usage("gitRef, sparse, depth and gitSecret go with git")
	case s.Archive == "" && (s.ArchiveFormat != "" || s.ArchiveDigest != ""):
		return nil, Usage("archiveFormat and archiveDigest go with archive")
	case s.OCI == "" && s.OCISecret != "":
		return nil, Usage("ociSecret goes with oci")
	}
	name := s.SourceRoot
	if name == "" {
		name = DefaultSourceRoot
	}
	root := &wbv1.EnvironmentRoot{Name: wbv1.RootName(name)}
	switch {
	case s.Git != "":
		g := &wbv1.GitRootSource{}
		if s.GitRef != "" {
			if i := strings.LastIndex(s.Git, "@"); i > 0 && commitRE.MatchString(s.Git[i+1:]) {
				return nil, Usage("git %q names a commit; with gitRef give the URL alone", s.Git)
			}
			if strings.ContainsAny(s.GitRef, " \t\n:~^?*[\\") || strings.HasPrefix(s.GitRef, "-") || len(s.GitRef) > 255 {
				return nil, Usage("gitRef %q is not a branch or tag name", s.GitRef)
			}
			g.URL, g.Ref = s.Git, ptr(s.GitRef)
		} else {
			url, commit, err := SplitGitSource(s.Git)
			if err != nil {
				return nil, err
			}
			g.URL, g.Commit = url, ptr(commit)
		}
		for _, p := range s.Sparse {
			if p == "" || strings.HasPrefix(p, "/") || strings.Contains("/"+p+"/", "/../") {
				return nil, Usage("sparse path %q must be root-relative", p)
			}
			g.SparsePaths = append(g.SparsePaths, wbv1.RelativePath(p))
		}
		if s.Depth < 0 {
			return nil, Usage("depth %d must be positive", s.Depth)
		}
		if s.Depth > 0 {
			g.Depth = ptr(s.Depth)
		}
		if s.GitSecret != "" {
			g.CredentialsSecretRef = &wbv1.SecretKeyReference{Name: wbv1.ObjectName(s.GitSecret)}
		}
		root.Git = g
	case s.Archive != "":
		f := wbv1.ArchiveFormat(s.ArchiveFormat)
		if f == "" {
			if f = ArchiveFormatOf(s.Archive); f == "" {
				f = wbv1.ArchiveFormatTarGzip
			}
		}
		switch f {
		case wbv1.ArchiveFormatTar, wbv1.ArchiveFormatTarGzip, wbv1.ArchiveFormatZip:
		default:
			return nil, Usage("archive format %q must be tar, tar+gzip or zip", f)
		}
		a := &wbv1.ArchiveRootSource{ArtifactRef: wbv1.ObjectName(s.Archive), Format: f}
		if s.ArchiveDigest != "" {
			if !digestRE.MatchString(s.ArchiveDigest) {
				return nil, Usage("archive digest %q must be sha256:<64 hex>", s.ArchiveDigest)
			}
			a.Digest = ptr(wbv1.Digest(s.ArchiveDigest))
		}
		root.Archive = a
	case s.OCI != "":
		o := &wbv1.OCIRootSource{Ref: s.OCI}
		if s.OCISecret != "" {
			o.CredentialsSecretRef = &wbv1.SecretKeyReference{Name: wbv1.ObjectName(s.OCISecret)}
		}
		root.OCI = o
	}
	return root, nil
}

// ArchiveArtifactName is the upload Artifact an `env create --archive FILE` fills.
func ArchiveArtifactName(env string) string { return env + "-archive" }

// FileDigest hashes the file at path (at most MaxUploadBytes) and returns its digest.
func FileDigest(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, Usage("opening %s: %v", path, err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, MaxUploadBytes+1))
	if err != nil {
		return "", 0, fmt.Errorf("reading %s: %w", path, err)
	}
	if n > MaxUploadBytes {
		return "", 0, &Error{Class: ClassCapReached, Code: "upload-too-large", Object: "archive " + path,
			Message: fmt.Sprintf("above %d bytes; uploads are at most %d bytes", MaxUploadBytes, MaxUploadBytes)}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n, nil
}

// UploadArchive uploads the file at path as the upload Artifact ArchiveArtifactName(env)
// stored on node (an archive source is materialized only from its own node's store, so the
// Environment is then pinned there with a nodeSelector), and checks the stored digest
// against the file's.
func (c *Client) UploadArchive(ctx context.Context, env, node, path string) (*wbv1.Artifact, error) {
	digest, _, err := FileDigest(path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, Usage("opening %s: %v", path, err)
	}
	defer func() { _ = f.Close() }()
	a := &wbv1.Artifact{Spec: wbv1.ArtifactSpec{EnvironmentRef: wbv1.ObjectName(env), Source: "upload"}}
	a.Name, a.Namespace = ArchiveArtifactName(env), c.Namespace
	a.Labels = map[string]string{wbv1.NodeLabel: node, wbv1.EnvironmentLabel: env}
	if err := c.Kube.Create(ctx, a); err != nil {
		return nil, Wrap("archive artifact for "+env, err)
	}
	if err := c.UploadTo(ctx, a.Name, f); err != nil {
		_ = c.Kube.Delete(context.WithoutCancel(ctx), a)
		return nil, err
	}
	if err := c.Kube.Get(ctx, objectKey(c.Namespace, a.Name), a); err != nil {
		return nil, Wrap("artifact "+a.Name, err)
	}
	if string(a.Status.Digest) != digest {
		return nil, refused("artifact "+a.Name, "digest-mismatch", fmt.Sprintf("the node stored %s; %s hashes to %s", a.Status.Digest, path, digest))
	}
	return a, nil
}

// SoleNode is the name of the cluster's only WorkbenchNode (a Usage error when there are
// none or several: the caller names one).
func (c *Client) SoleNode(ctx context.Context) (string, error) {
	var nodes wbv1.WorkbenchNodeList
	if err := c.Kube.List(ctx, &nodes); err != nil {
		return "", Wrap("workbench nodes", err)
	}
	if len(nodes.Items) != 1 {
		return "", Usage("%d workbench nodes: name the node that stores the archive with --node", len(nodes.Items))
	}
	return nodes.Items[0].Name, nil
}

// RootExportRequest is one export of an environment root (format tar, tar+gzip or git-patch).
type RootExportRequest struct {
	Environment string
	Root        string
	Path        string
	Format      wbv1.ExportFormat
	FilePatch   string
}

// ExportAs creates an export Artifact as r asks and waits until the node stored it.
func (c *Client) ExportAs(ctx context.Context, r RootExportRequest) (*wbv1.Artifact, error) {
	return c.captureExport(ctx, r.Environment, newExportArtifact(c.Namespace, r))
}

func newExportArtifact(ns string, r RootExportRequest) *wbv1.Artifact {
	a := &wbv1.Artifact{Spec: wbv1.ArtifactSpec{EnvironmentRef: wbv1.ObjectName(r.Environment), Source: "export", Root: ptr(wbv1.RootName(r.Root))}}
	a.Namespace, a.GenerateName = ns, r.Environment+"-export-"
	if r.Format == wbv1.ExportFormatGitPatch {
		a.GenerateName = r.Environment + "-patch-"
	}
	if r.Path != "" {
		a.Spec.Path = ptr(wbv1.RelativePath(r.Path))
	}
	if r.Format != "" && r.Format != wbv1.ExportFormatTar {
		a.Spec.Format = ptr(r.Format)
	}
	if r.FilePatch != "" {
		a.Spec.FilePatchRef = ptr(wbv1.ObjectName(r.FilePatch))
	}
	return a
}

// SourcedRoot returns the name of env's only sourced root, else its only root ("" when
// neither is unique): the root `export patch ENV` exports by default.
func SourcedRoot(e *wbv1.Environment) string {
	var sourced []string
	for _, r := range e.Spec.Roots {
		if r.Git != nil || r.Archive != nil || r.OCI != nil {
			sourced = append(sourced, string(r.Name))
		}
	}
	switch {
	case len(sourced) == 1:
		return sourced[0]
	case len(sourced) == 0 && len(e.Spec.Roots) == 1:
		return string(e.Spec.Roots[0].Name)
	}
	return ""
}

// GetEnvironment reads Environment name.
func (c *Client) GetEnvironment(ctx context.Context, name string) (*wbv1.Environment, error) {
	var e wbv1.Environment
	if err := c.Kube.Get(ctx, objectKey(c.Namespace, name), &e); err != nil {
		return nil, Wrap("environment "+name, err)
	}
	return &e, nil
}
