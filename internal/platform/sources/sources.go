// Package sources materializes an Environment root from a workspace source (issue 28
// item 1): a git commit, an uploaded archive (tar, tar+gzip, zip) or an OCI artifact's
// layers, into an empty directory the caller owns (the node agent's managed copy,
// internal/backends/fixturecopy). Every fetch runs as the node agent, never in the
// sandbox, under a node Policy (an allowlist of source hosts); every refusal carries a
// stable code of internal/actuation's vocabulary (actuation.Refusal). All writes go through
// an fsaccess.Root that refuses symlinks on the way (openat2 RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS): nothing is written outside the directory. No Kubernetes imports;
// docs/workspace-sources.md is the user-facing description.
package sources

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"path/filepath"
	"strings"

	"sensorium.dev/workbench/internal/actuation"
)

// Default bounds of one materialized root (Limits' zero fields take them).
const (
	DefaultMaxEntries   = 100_000   // archive-too-many-entries (files, directories and links)
	DefaultMaxBytes     = 1 << 30   // archive-too-large: bytes of regular files written
	DefaultMaxFileBytes = 256 << 20 // archive-file-too-large: one regular file
	DefaultMaxDepth     = 64        // archive-path-invalid: directory nesting
	// MaxLayers bounds an OCI artifact's layers.
	MaxLayers = 128
	// MaxSparsePaths bounds a git source's sparse paths.
	MaxSparsePaths = 64
)

// Limits bound one materialized root. Bytes and entries count what is written, not what
// headers claim, so a compressed bomb stops at the cap.
type Limits struct {
	MaxEntries   int64
	MaxBytes     int64
	MaxFileBytes int64
	MaxDepth     int
	// MaxFetchBytes bounds what a git fetch writes into .git while it downloads
	// (source-fetch-too-large; default DefaultMaxFetchBytes).
	MaxFetchBytes int64
}

// WithDefaults fills zero fields with the defaults.
func (l Limits) WithDefaults() Limits {
	l.MaxEntries = actuation.OrDefault(l.MaxEntries, DefaultMaxEntries)
	l.MaxBytes = actuation.OrDefault(l.MaxBytes, DefaultMaxBytes)
	l.MaxFileBytes = actuation.OrDefault(l.MaxFileBytes, DefaultMaxFileBytes)
	if l.MaxFileBytes > l.MaxBytes {
		l.MaxFileBytes = l.MaxBytes
	}
	l.MaxDepth = actuation.OrDefault(l.MaxDepth, DefaultMaxDepth)
	l.MaxFetchBytes = actuation.OrDefault(l.MaxFetchBytes, DefaultMaxFetchBytes)
	return l
}

// Result is what one materialization produced (status.roots[]).
type Result struct {
	// Resolved is the commit id (git) or content digest (archive, oci) materialized.
	Resolved string
	// Entries and Bytes count the files, directories and links and the regular-file bytes
	// in the root (a git checkout's .git included).
	Entries int64
	Bytes   int64
	// FetchMillis and MaterializeMillis are the time spent fetching and checking out or
	// extracting.
	FetchMillis       int64
	MaterializeMillis int64
}

// Policy is the node operator's source policy (node agent configuration, never the
// cluster's): which hosts a fetch may reach and whether a branch, tag or OCI tag may stand
// for a commit or digest.
type Policy struct {
	// AllowedHosts are the hosts (host or host:port, case-insensitive; "*.example.org"
	// matches subdomains) git and OCI sources may be fetched from. Empty: none.
	AllowedHosts []string
	// AllowedFileDirs are the absolute directories a file:// git URL may lie in.
	AllowedFileDirs []string
	// AllowRefs lets a git source name a branch or tag, and an OCI source a tag, resolved
	// to the commit or digest recorded in status.
	AllowRefs bool
	// AllowPlainHTTP lets git use http:// and OCI a registry over plain HTTP (default:
	// loopback hosts only).
	AllowPlainHTTP bool
}

// hostAllowed reports whether host (host or host:port) is in the allowlist.
func (p Policy) hostAllowed(hostport string) bool {
	hostport = strings.ToLower(hostport)
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	for _, a := range p.AllowedHosts {
		a = strings.ToLower(strings.TrimSpace(a))
		switch {
		case a == "":
		case a == hostport || (a == host && !strings.Contains(a, ":")):
			return true
		case strings.HasPrefix(a, "*.") && strings.HasSuffix(host, a[1:]) && len(host) > len(a)-1:
			return true
		}
	}
	return false
}

// plainHTTPAllowed reports whether host may be reached over plain HTTP.
func (p Policy) plainHTTPAllowed(hostport string) bool {
	if p.AllowPlainHTTP {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// fileAllowed reports whether the clean absolute dir lies inside an allowed file dir.
func (p Policy) fileAllowed(dir string) bool {
	for _, a := range p.AllowedFileDirs {
		a = filepath.Clean(a)
		if !filepath.IsAbs(a) {
			continue
		}
		if dir == a || strings.HasPrefix(dir, strings.TrimSuffix(a, "/")+"/") {
			return true
		}
	}
	return false
}

// GitURL is a checked git URL.
type GitURL struct {
	Raw    string
	Scheme string // https, http, ssh or file
	Host   string // host[:port] ("" for file)
	Path   string // file: the clean absolute directory
}

// ParseGitURL checks the URL's shape (no policy): scheme https, http, ssh or file, no
// userinfo other than an ssh user name (credentials come from a Secret, never from a URL
// that lands in .git or a log), no query or fragment.
func ParseGitURL(raw string) (GitURL, error) {
	if raw == "" || len(raw) > 2048 {
		return GitURL{}, actuation.Refusef(actuation.CodeSourceInvalid, "git url must be 1..2048 bytes")
	}
	for _, c := range raw {
		if c < 0x21 || c == 0x7f {
			return GitURL{}, actuation.Refusef(actuation.CodeSourceInvalid, "git url %q has a space or control character", raw)
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return GitURL{}, actuation.Refusef(actuation.CodeSourceInvalid, "git url %q: %v", raw, err)
	}
	// git's protocol allowlist is case-sensitive: the URL handed to git carries its scheme
	// lower-cased (the rest exactly as written), so FILE:// and file:// name one source.
	g := GitURL{Raw: strings.ToLower(u.Scheme) + raw[len(u.Scheme):], Scheme: strings.ToLower(u.Scheme), Host: u.Host}
	if u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return GitURL{}, actuation.Refusef(actuation.CodeSourceInvalid, "git url %q: no query, fragment or opaque part", raw)
	}
	switch g.Scheme {
	case "https", "http", "ssh":
		if u.Host == "" || u.Hostname() == "" {
			return GitURL{}, actuation.Refusef(actuation.CodeSourceInvalid, "git url %q has no host", raw)
		}
		if u.User != nil {
			if _, hasPassword := u.User.Password(); g.Scheme != "ssh" || hasPassword {
				return GitURL{}, actuation.Refusef(actuation.CodeSourceInvalid, "git url %q carries credentials: name a credentials Secret instead", redactURL(u))
			}
		}
		if strings.HasPrefix(u.Hostname(), "-") {
			return GitURL{}, actuation.Refusef(actuation.CodeSourceInvalid, "git url %q: host may not start with '-'", raw)
		}
	case "file":
		if u.Host != "" || u.User != nil || !path.IsAbs(u.Path) || path.Clean(u.Path) != u.Path {
			return GitURL{}, actuation.Refusef(actuation.CodeSourceInvalid, "git url %q: file:// takes a clean absolute path and no host", raw)
		}
		g.Path = u.Path
	default:
		return GitURL{}, actuation.Refusef(actuation.CodeSourceInvalid, "git url %q: scheme must be https, http, ssh or file", raw)
	}
	return g, nil
}

func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

// CheckGitURL checks the URL against the node policy.
func (p Policy) CheckGitURL(g GitURL) error {
	switch g.Scheme {
	case "file":
		if !p.fileAllowed(g.Path) {
			return actuation.Refusef(actuation.CodeSourceHostNotAllowed, "git url %q: directory is outside the node's allowed source directories", g.Raw)
		}
		return nil
	case "http":
		if !p.plainHTTPAllowed(g.Host) {
			return actuation.Refusef(actuation.CodeSourceHostNotAllowed, "git url %q: plain http is allowed for loopback hosts only", g.Raw)
		}
	}
	if !p.hostAllowed(g.Host) {
		return actuation.Refusef(actuation.CodeSourceHostNotAllowed, "git url %q: host %q is outside the node's source allowlist", g.Raw, g.Host)
	}
	return nil
}

// ValidCommit reports whether s is a full commit id (40 or 64 lowercase hex digits).
func ValidCommit(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ValidRef reports whether s is a usable branch or tag name (git check-ref-format's
// rules, conservatively: no leading '-', no "..", no control characters or specials).
func ValidRef(s string) bool {
	if s == "" || len(s) > 255 || strings.HasPrefix(s, "-") || strings.HasPrefix(s, "/") || strings.HasSuffix(s, "/") ||
		strings.HasSuffix(s, ".lock") || strings.HasSuffix(s, ".") || strings.Contains(s, "..") || strings.Contains(s, "//") ||
		strings.Contains(s, "@{") || s == "@" {
		return false
	}
	for _, c := range s {
		if c < 0x21 || c == 0x7f || strings.ContainsRune(" ~^:?*[\\", c) {
			return false
		}
	}
	return true
}

func errf(code, format string, args ...any) error {
	return actuation.Refusef(actuation.Code(code), format, args...)
}

func wrapf(code string, err error, format string, args ...any) error {
	return actuation.Wrapf(actuation.Code(code), err, format, args...)
}

var _ = fmt.Sprintf
