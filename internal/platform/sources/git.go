package sources

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// GitSource is a repository and a commit (spec.roots[].git), credentials resolved.
type GitSource struct {
	URL         string
	Commit      string // a full commit id; exactly one of Commit and Ref
	Ref         string // a branch or tag, only when Policy.AllowRefs
	SparsePaths []string
	Depth       int // 0: 1
	Submodules  bool
	LFS         bool
	Credentials GitCredentials
}

// GitCredentials come from the Environment's credentials Secret. They reach only the git
// process's environment (an http.extraHeader carried by GIT_CONFIG_* variables) or a key
// file in the caller's private scratch directory (ssh); never argv, the checkout, .git,
// a log or a message.
type GitCredentials struct {
	Token         string // HTTPS: sent as HTTP Basic x-access-token:<token>
	SSHPrivateKey []byte // ssh: with KnownHosts (StrictHostKeyChecking=yes)
	KnownHosts    []byte
}

// Git runs the git binary for the node agent.
type Git struct {
	// Binary is the git executable (default: git on /usr/local/bin:/usr/bin:/bin).
	Binary string
	// Scratch is a directory private to the agent (0700) where a fetch keeps its empty
	// HOME, empty template and hooks directories and, for ssh, the key and known_hosts
	// files; each fetch uses (and removes) its own subdirectory.
	Scratch string
	// Timeout bounds one materialization (default 10 minutes).
	Timeout time.Duration
}

// Bounds of git's output kept for messages.
const (
	maxGitStderr        = 8 << 10
	maxGitStdout        = 64 << 20 // ls-tree of a large tree
	maxGitAttributes    = 64 << 10
	maxGitAttributeList = 1000
	defaultGitTimeout   = 10 * time.Minute
)

// ValidateGitSource checks a git source's shape (no policy, no network): URL, exactly one
// of commit and ref, sparse paths, depth.
func ValidateGitSource(src GitSource) (GitURL, error) {
	u, err := ParseGitURL(src.URL)
	if err != nil {
		return u, err
	}
	switch {
	case src.Commit != "" && src.Ref != "":
		return u, errf(string(actuation.CodeSourceInvalid), "a git source has a commit or a ref, not both")
	case src.Commit != "" && !ValidCommit(src.Commit):
		return u, errf(string(actuation.CodeSourceInvalid), "commit %q is not a full commit id (40 or 64 lowercase hex digits)", src.Commit)
	case src.Commit == "" && src.Ref == "":
		return u, errf(string(actuation.CodeSourceInvalid), "a git source needs a commit (or a ref)")
	case src.Ref != "" && !ValidRef(src.Ref):
		return u, errf(string(actuation.CodeSourceInvalid), "ref %q is not a valid branch or tag name", src.Ref)
	}
	if len(src.SparsePaths) > MaxSparsePaths {
		return u, errf(string(actuation.CodeSourceInvalid), "%d sparse paths, at most %d", len(src.SparsePaths), MaxSparsePaths)
	}
	for _, p := range src.SparsePaths {
		if err := fsaccess.CheckRel(p, true); err != nil || strings.HasPrefix(p, ".git") {
			return u, errf(string(actuation.CodeSourceInvalid), "sparse path %q must be a clean relative directory outside .git", p)
		}
	}
	if src.Depth < 0 || src.Depth > 100000 {
		return u, errf(string(actuation.CodeSourceInvalid), "depth %d outside 1..100000", src.Depth)
	}
	return u, nil
}

// gitRun is one materialization's git invocation context.
type gitRun struct {
	bin     string
	env     []string
	secrets []string // redacted from every message
	groups  string   // file recording each git process group started (SweepScratch)
}

func (g *gitRun) redact(s string) string {
	for _, sec := range g.secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "[redacted]")
		}
	}
	return s
}

type gitError struct {
	args   []string
	stderr string
	err    error
}

func (e *gitError) Error() string {
	return fmt.Sprintf("git %s: %v: %s", strings.Join(e.args, " "), e.err, strings.TrimSpace(e.stderr))
}

// run runs git with args in dir and returns its stdout (bounded).
func (g *gitRun) run(ctx context.Context, dir string, extraEnv []string, args ...string) ([]byte, error) {
	return g.runWatched(ctx, dir, extraEnv, nil, args...)
}

// runWatched is run with a watch: a function called every fetchWatchInterval while git
// runs; when it returns an error, git's whole process group (remote helpers, index-pack)
// is killed and that error returned. Git runs in a process group of its own, so a
// deadline or a watch stops every process it started, not only git itself.
func (g *gitRun) runWatched(ctx context.Context, dir string, extraEnv []string, watch func() error, args ...string) ([]byte, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cmd := exec.CommandContext(ctx, g.bin, args...)
	cmd.Dir = dir
	cmd.Env = append(append([]string(nil), g.env...), extraEnv...)
	var stdout, stderr capped
	stdout.max, stderr.max = maxGitStdout, maxGitStderr
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	setProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		return nil, &gitError{args: redactArgs(args), err: err}
	}
	recordGroup(g.groups, cmd.Process.Pid)
	done := make(chan struct{})
	if watch != nil {
		go func() {
			t := time.NewTicker(fetchWatchInterval)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					if werr := watch(); werr != nil {
						cancel(werr)
						return
					}
				}
			}
		}()
	}
	err := cmd.Wait()
	close(done)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return nil, cause // the watch's refusal
	}
	if watch != nil && err == nil {
		if werr := watch(); werr != nil { // a fetch faster than one interval is measured once it ends
			return nil, werr
		}
	}
	if err == nil && stdout.over {
		err = errors.New("output above the cap")
	}
	if err != nil {
		return nil, &gitError{args: redactArgs(args), stderr: g.redact(stderr.buf.String()), err: err}
	}
	return stdout.buf.Bytes(), nil
}

func redactArgs(args []string) []string { return args } // argv never holds a secret

// capped is a bounded buffer: bytes past max are dropped and over is set.
type capped struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room < len(p) {
		c.over = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return c.buf.Write(p)
}

// gitEnv is the scrubbed environment of every git process: no system or global config,
// no prompts, the one protocol the URL uses, hooks from an empty directory, no redirects
// (an Authorization header never follows one), LFS smudging off. extra config pairs go
// through GIT_CONFIG_COUNT (the environment, never argv).
func gitEnv(scratch, scheme string, extra [][2]string) []string {
	home := filepath.Join(scratch, "home")
	cfg := [][2]string{
		{"protocol.allow", "never"},
		{"protocol." + scheme + ".allow", "always"},
		{"core.hooksPath", filepath.Join(scratch, "hooks")},
		{"http.followRedirects", "false"},
		{"http.lowSpeedLimit", "1"}, // a server that stops sending is given up on (helpers never hang forever)
		{"http.lowSpeedTime", "120"},
		{"core.fsmonitor", "false"},
		{"core.symlinks", "true"},
		{"credential.helper", ""},
		{"fetch.recurseSubmodules", "false"},
		{"submodule.recurse", "false"},
		{"init.templateDir", filepath.Join(scratch, "template")},
		{"filter.lfs.smudge", ""},
		{"filter.lfs.process", ""},
		{"filter.lfs.required", "false"},
		{"advice.detachedHead", "false"},
		{"gc.auto", "0"},
		{"maintenance.auto", "false"},
	}
	cfg = append(cfg, extra...)
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + home,
		"LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=/bin/false",
		"SSH_ASKPASS=/bin/false",
		"GIT_ALLOW_PROTOCOL=" + scheme,
		"GIT_LFS_SKIP_SMUDGE=1",
		"GIT_TEMPLATE_DIR=" + filepath.Join(scratch, "template"),
		"GIT_CONFIG_COUNT=" + strconv.Itoa(len(cfg)),
	}
	for i, kv := range cfg {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	return env
}

// authFor returns the config pairs (and the ssh command) carrying the credentials for a
// URL, and the strings to redact.
func authFor(u GitURL, cred GitCredentials, scratch string) ([][2]string, []string, []string, error) {
	switch u.Scheme {
	case "https", "http":
		if cred.Token == "" {
			return nil, nil, nil, nil
		}
		if strings.ContainsAny(cred.Token, "\r\n\x00") {
			return nil, nil, nil, errf(string(actuation.CodeSourceCredentialsInvalid), "the token holds a line break or NUL")
		}
		basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + cred.Token))
		return [][2]string{{"http.extraHeader", "Authorization: Basic " + basic}}, nil, []string{cred.Token, basic}, nil
	case "ssh":
		if len(cred.SSHPrivateKey) == 0 {
			return nil, []string{"GIT_SSH_COMMAND=ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile=/dev/null"}, nil, nil
		}
		if len(cred.KnownHosts) == 0 {
			return nil, nil, nil, errf(string(actuation.CodeSourceCredentialsInvalid), "an ssh key needs known_hosts (hosts are pinned)")
		}
		key, kh := filepath.Join(scratch, "id"), filepath.Join(scratch, "known_hosts")
		if err := os.WriteFile(key, cred.SSHPrivateKey, 0o600); err != nil {
			return nil, nil, nil, err
		}
		if err := os.WriteFile(kh, cred.KnownHosts, 0o600); err != nil {
			return nil, nil, nil, err
		}
		return nil, []string{"GIT_SSH_COMMAND=ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes" +
			" -o UserKnownHostsFile=" + kh + " -i " + key}, nil, nil
	}
	return nil, nil, nil, nil
}

// MaterializeGit fetches src (as the calling agent, under pol) into dst, an empty
// directory, and checks it out: .git present with an empty hooks directory and a minimal
// config; the checked-out tree verified against the commit's tree; the checkout bounded by
// lim and every symlink in it pointing inside.
func (g Git) MaterializeGit(ctx context.Context, src GitSource, pol Policy, dst string, lim Limits) (Result, error) {
	lim = lim.WithDefaults()
	u, err := ValidateGitSource(src)
	if err != nil {
		return Result{}, err
	}
	if err := pol.CheckGitURL(u); err != nil {
		return Result{}, err
	}
	if src.Ref != "" && !pol.AllowRefs {
		return Result{}, errf(string(actuation.CodeSourceRefNotAllowed), "ref %q: this node's policy takes full commit ids only", src.Ref)
	}
	timeout := g.Timeout
	if timeout <= 0 {
		timeout = defaultGitTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if g.Scratch == "" {
		return Result{}, errors.New("sources: git needs a scratch directory")
	}
	if err := os.MkdirAll(g.Scratch, 0o700); err != nil {
		return Result{}, err
	}
	scratch, err := os.MkdirTemp(g.Scratch, "git-")
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = os.RemoveAll(scratch) }()
	for _, d := range []string{"home", "hooks", "template"} {
		if err := os.Mkdir(filepath.Join(scratch, d), 0o700); err != nil {
			return Result{}, err
		}
	}
	bin := g.Binary
	if bin == "" {
		for _, d := range []string{"/usr/local/bin", "/usr/bin", "/bin"} {
			if _, err := os.Stat(filepath.Join(d, "git")); err == nil {
				bin = filepath.Join(d, "git")
				break
			}
		}
		if bin == "" {
			return Result{}, errf(string(actuation.CodeSourceFetchFailed), "no git binary on this node")
		}
	}
	cfg, sshEnv, secrets, err := authFor(u, src.Credentials, scratch)
	if err != nil {
		return Result{}, err
	}
	groups := filepath.Join(scratch, groupsFile)
	run := &gitRun{bin: bin, env: append(gitEnv(scratch, u.Scheme, cfg), sshEnv...), secrets: secrets, groups: groups}
	local := &gitRun{bin: bin, env: gitEnv(scratch, "file", nil), groups: groups} // no credentials for local steps

	start := time.Now()
	initArgs := []string{"init", "-q"}
	if len(src.Commit) == 64 {
		initArgs = append(initArgs, "--object-format=sha256")
	}
	if _, err := local.run(ctx, dst, nil, initArgs...); err != nil {
		return Result{}, wrapf(string(actuation.CodeSourceFetchFailed), err, "git init")
	}
	want := src.Commit
	if want == "" {
		want = src.Ref
	}
	depth := src.Depth
	if depth <= 0 {
		depth = 1
	}
	fetchArgs := []string{"fetch", "-q", "--no-tags", "--no-recurse-submodules", "--depth=" + strconv.Itoa(depth), "--", u.Raw, want}
	if _, err := run.runWatched(ctx, dst, nil, fetchBound(dst, lim.MaxFetchBytes), fetchArgs...); err != nil {
		return Result{}, classifyFetch(ctx, src, err)
	}
	out, err := local.run(ctx, dst, nil, "rev-parse", "--verify", "-q", "FETCH_HEAD^{commit}")
	resolved := strings.TrimSpace(string(out))
	if err != nil || !ValidCommit(resolved) {
		return Result{}, errf(string(actuation.CodeSourceCommitNotFound), "%q names no commit in %s", want, u.Raw)
	}
	if src.Commit != "" && resolved != src.Commit {
		return Result{}, errf(string(actuation.CodeSourceCommitNotFound), "fetched %s where commit %s was asked", resolved, src.Commit)
	}
	res := Result{Resolved: resolved, FetchMillis: time.Since(start).Milliseconds()}
	start = time.Now()

	if err := g.precheck(ctx, local, dst, resolved, src, lim); err != nil {
		return res, err
	}
	if len(src.SparsePaths) > 0 {
		args := append([]string{"sparse-checkout", "set", "--cone", "--"}, src.SparsePaths...)
		if _, err := local.run(ctx, dst, nil, args...); err != nil {
			return res, wrapf(string(actuation.CodeSourceFetchFailed), err, "sparse checkout")
		}
	}
	if _, err := local.run(ctx, dst, nil, "checkout", "-q", "--detach", resolved); err != nil {
		return res, wrapf(string(actuation.CodeSourceFetchFailed), err, "checkout %s", resolved)
	}
	var submodules [][2]string
	if src.Submodules {
		if submodules, err = g.submodules(ctx, run, local, dst, u, src, pol, lim, scratch, cfg, sshEnv); err != nil {
			return res, err
		}
	}
	if err := verifyTree(ctx, local, dst, resolved); err != nil {
		return res, err
	}
	if err := finalizeGitDir(dst, len(src.Commit) == 64 || len(resolved) == 64, len(src.SparsePaths) > 0, submodules); err != nil {
		return res, err
	}
	entries, bytes, err := measure(dst, lim)
	res.Entries, res.Bytes = entries, bytes
	res.MaterializeMillis = time.Since(start).Milliseconds()
	return res, err
}

// classifyFetch turns a failed fetch into a refusal: no such commit or ref, or a failure.
func classifyFetch(ctx context.Context, src GitSource, err error) error {
	if actuation.CodeOf(err) == actuation.CodeSourceFetchTooLarge {
		return err
	}
	var ge *gitError
	msg := err.Error()
	if errors.As(err, &ge) {
		msg = ge.stderr
	}
	if ctx.Err() != nil {
		return wrapf(string(actuation.CodeSourceFetchFailed), err, "fetch did not finish in time")
	}
	if strings.Contains(msg, "Host key verification failed") || strings.Contains(msg, "No ED25519 host key is known") || strings.Contains(msg, "host key for") {
		return wrapf(string(actuation.CodeSourceHostKeyUnknown), err, "the ssh server's host key is not the one pinned in the Secret's known_hosts")
	}
	if credentialsRejected(src.Credentials, msg) {
		return wrapf(string(actuation.CodeSourceCredentialsRejected), err, "the server refused the Secret's credentials")
	}
	for _, s := range []string{"not our ref", "couldn't find remote ref", "no such remote ref", "unadvertised object", "upload-pack: not our", "invalid refspec", "remote error: want"} {
		if strings.Contains(msg, s) {
			what := src.Commit
			if what == "" {
				what = src.Ref
			}
			return wrapf(string(actuation.CodeSourceCommitNotFound), err, "the repository has no %s", what)
		}
	}
	return wrapf(string(actuation.CodeSourceFetchFailed), err, "fetch")
}

// credentialsRejected reports whether git's stderr says the server refused credentials
// that were given (a key the ssh server does not accept, a token the HTTPS server
// answers 401/403 to). Without credentials the same messages stay a fetch failure: the
// Secret holds nothing to reject.
func credentialsRejected(cred GitCredentials, msg string) bool {
	switch {
	case len(cred.SSHPrivateKey) > 0:
		return strings.Contains(msg, "Permission denied (publickey")
	case cred.Token != "":
		// a 401 to the token's header makes git ask for a user name, which is disabled
		return strings.Contains(msg, "Authentication failed for") || strings.Contains(msg, "could not read Username for") ||
			strings.Contains(msg, "The requested URL returned error: 403")
	}
	return false
}

// precheck bounds the commit's tree before anything is written to the worktree and
// refuses LFS unless declared.
func (g Git) precheck(ctx context.Context, local *gitRun, dst, commit string, src GitSource, lim Limits) error {
	out, err := local.run(ctx, dst, nil, "ls-tree", "-r", "-t", "-l", "-z", "--full-tree", commit)
	if err != nil {
		if strings.Contains(err.Error(), "output above the cap") {
			return errf(string(actuation.CodeArchiveTooManyEntries), "the commit's tree listing is above %d bytes", maxGitStdout)
		}
		return wrapf(string(actuation.CodeSourceFetchFailed), err, "list the commit's tree")
	}
	inSparse := func(p string) bool {
		if len(src.SparsePaths) == 0 || !strings.Contains(p, "/") {
			return true
		}
		for _, s := range src.SparsePaths {
			if p == s || strings.HasPrefix(p, s+"/") || strings.HasPrefix(s, p+"/") {
				return true
			}
		}
		return false
	}
	var entries, total int64
	var attrs []string
	for _, rec := range bytes.Split(out, []byte{0}) {
		if len(rec) == 0 {
			continue
		}
		meta, name, ok := strings.Cut(string(rec), "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 4 || !inSparse(name) {
			continue
		}
		entries++
		if entries > lim.MaxEntries {
			return errf(string(actuation.CodeArchiveTooManyEntries), "the commit's tree has more than %d entries", lim.MaxEntries)
		}
		if f[1] != "blob" {
			continue
		}
		size, _ := strconv.ParseInt(f[3], 10, 64)
		if size > lim.MaxFileBytes {
			return errf(string(actuation.CodeArchiveFileTooLarge), "%q is %d bytes, above %d", name, size, lim.MaxFileBytes)
		}
		total += size
		if total > lim.MaxBytes {
			return errf(string(actuation.CodeArchiveTooLarge), "the commit's tree holds more than %d bytes", lim.MaxBytes)
		}
		if path.Base(name) == ".gitattributes" && len(attrs) < maxGitAttributeList {
			attrs = append(attrs, f[2])
		}
	}
	if src.LFS {
		return errf(string(actuation.CodeSourceLFSRefused), "lfs is declared but this node does not fetch Git LFS objects")
	}
	for _, blob := range attrs {
		data, err := local.run(ctx, dst, nil, "cat-file", "blob", blob)
		if err != nil {
			return wrapf(string(actuation.CodeSourceFetchFailed), err, "read .gitattributes")
		}
		if len(data) > maxGitAttributes {
			data = data[:maxGitAttributes]
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if !strings.HasPrefix(line, "#") && strings.Contains(line, "filter=lfs") {
				return errf(string(actuation.CodeSourceLFSRefused), "the repository stores files in Git LFS (.gitattributes: %q) and the source does not declare lfs", line)
			}
		}
	}
	return nil
}

// submodules checks every submodule URL against the policy, then fetches them (one level,
// the same depth); the token goes only to a submodule on the repository's own host.
func (g Git) submodules(ctx context.Context, run, local *gitRun, dst string, u GitURL, src GitSource, pol Policy, lim Limits, scratch string, cfg [][2]string, sshEnv []string) ([][2]string, error) {
	out, err := local.run(ctx, dst, nil, "config", "-f", ".gitmodules", "--get-regexp", `^submodule\..*\.url$`)
	if err != nil {
		return nil, nil // no .gitmodules or no submodule
	}
	var kept [][2]string
	base, _ := url.Parse(u.Raw)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		key, raw, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		name := strings.TrimSuffix(strings.TrimPrefix(key, "submodule."), ".url")
		if strings.HasPrefix(raw, "./") || strings.HasPrefix(raw, "../") {
			ref, err := url.Parse(raw)
			if err != nil || base == nil {
				return nil, errf(string(actuation.CodeSourceInvalid), "submodule %q url %q", name, raw)
			}
			raw = base.ResolveReference(ref).String()
		}
		su, err := ParseGitURL(raw)
		if err != nil {
			return nil, err
		}
		if su.Scheme != u.Scheme {
			return nil, errf(string(actuation.CodeSourceHostNotAllowed), "submodule %q url %q: another protocol than the repository's", name, raw)
		}
		if err := pol.CheckGitURL(su); err != nil {
			return nil, err
		}
		kept = append(kept, [2]string{name, raw})
		if _, err := local.run(ctx, dst, nil, "config", "submodule."+name+".url", raw); err != nil {
			return nil, wrapf(string(actuation.CodeSourceFetchFailed), err, "submodule %q", name)
		}
		r := run
		if !strings.EqualFold(su.Host, u.Host) {
			r = &gitRun{bin: run.bin, env: append(gitEnv(scratch, u.Scheme, nil), sshEnv...), secrets: run.secrets, groups: run.groups}
		}
		depth := src.Depth
		if depth <= 0 {
			depth = 1
		}
		if _, err := r.runWatched(ctx, dst, nil, fetchBound(dst, lim.MaxFetchBytes), "submodule", "update", "--init", "--depth="+strconv.Itoa(depth), "--", name); err != nil {
			if actuation.CodeOf(err) == actuation.CodeSourceFetchTooLarge {
				return nil, err
			}
			return nil, wrapf(string(actuation.CodeSourceFetchFailed), err, "submodule %q", name)
		}
	}
	_ = cfg
	return kept, nil
}

// verifyTree checks that the index and the worktree are exactly the commit's tree.
func verifyTree(ctx context.Context, local *gitRun, dst, commit string) error {
	want, err := local.run(ctx, dst, nil, "rev-parse", "--verify", commit+"^{tree}")
	if err != nil {
		return wrapf(string(actuation.CodeSourceTreeMismatch), err, "the commit's tree")
	}
	head, err := local.run(ctx, dst, nil, "rev-parse", "--verify", "HEAD^{tree}")
	if err != nil || !bytes.Equal(head, want) {
		return errf(string(actuation.CodeSourceTreeMismatch), "HEAD's tree is not commit %s's", commit)
	}
	idx, err := local.run(ctx, dst, nil, "write-tree")
	if err != nil || !bytes.Equal(bytes.TrimSpace(idx), bytes.TrimSpace(want)) {
		return errf(string(actuation.CodeSourceTreeMismatch), "the index's tree %s is not commit %s's tree %s", bytes.TrimSpace(idx), commit, bytes.TrimSpace(want))
	}
	st, err := local.run(ctx, dst, nil, "status", "--porcelain", "--untracked-files=all", "--ignored=no")
	if err != nil || len(bytes.TrimSpace(st)) != 0 {
		return errf(string(actuation.CodeSourceTreeMismatch), "the worktree differs from commit %s: %q", commit, truncate(string(st), 512))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// finalizeGitDir leaves .git host-owned and minimal: an empty hooks directory, a config
// holding only the repository format, sparse and submodule keys, no FETCH_HEAD.
func finalizeGitDir(dst string, sha256, sparse bool, submodules [][2]string) error {
	root, err := fsaccess.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	r := root.NoSymlinks()
	if e, err := r.Lstat(".git"); err != nil || e.Type != fsaccess.TypeDir {
		return errf(string(actuation.CodeSourceTreeMismatch), ".git is not a directory")
	}
	var b strings.Builder
	b.WriteString("[core]\n\trepositoryformatversion = ")
	if sha256 || sparse {
		b.WriteString("1\n")
	} else {
		b.WriteString("0\n")
	}
	b.WriteString("\tfilemode = true\n\tbare = false\n")
	if sha256 || sparse {
		b.WriteString("[extensions]\n")
		if sha256 {
			b.WriteString("\tobjectformat = sha256\n")
		}
		if sparse {
			b.WriteString("\tworktreeConfig = true\n")
		}
	}
	for _, s := range submodules {
		fmt.Fprintf(&b, "[submodule %q]\n\turl = %s\n\tactive = true\n", s[0], s[1])
	}
	if err := r.WriteFileAtomic(".git/config", []byte(b.String()), 0o644); err != nil {
		return err
	}
	if sparse {
		if err := r.WriteFileAtomic(".git/config.worktree", []byte("[core]\n\tsparseCheckout = true\n\tsparseCheckoutCone = true\n"), 0o644); err != nil {
			return err
		}
	}
	for _, f := range []string{".git/FETCH_HEAD", ".git/ORIG_HEAD"} {
		if err := r.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) && string(actuation.CodeOf(err)) != string(actuation.CodePathNotFound) {
			return err
		}
	}
	if err := r.RemoveAll(".git/hooks"); err != nil && string(actuation.CodeOf(err)) != string(actuation.CodePathNotFound) {
		return err
	}
	return r.Mkdir(".git/hooks", 0o755)
}

// measure counts dst's entries and regular-file bytes (bounded by lim) and refuses a
// symlink pointing outside it or a special file.
func measure(dst string, lim Limits) (int64, int64, error) {
	root, err := fsaccess.OpenRoot(dst)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = root.Close() }()
	var entries, total int64
	wr, err := root.Walk("", fsaccess.WalkLimits{MaxEntries: int(min(lim.MaxEntries+1, 1<<30)), MaxDepth: lim.MaxDepth + 8}, func(w *fsaccess.WalkEntry) error {
		entries++
		switch w.Type {
		case fsaccess.TypeSymlink:
			if !linkInside(w.Path, w.LinkTarget) {
				return errf(string(actuation.CodeArchiveLinkEscape), "symlink %q -> %q points outside the root", w.Path, w.LinkTarget)
			}
		case fsaccess.TypeOther:
			return errf(string(actuation.CodeArchiveSpecialFile), "%q is a special file", w.Path)
		case fsaccess.TypeFile:
			total += w.Size
		}
		return nil
	})
	if err != nil {
		return entries, total, err
	}
	if wr.Truncated || entries > lim.MaxEntries {
		return entries, total, errf(string(actuation.CodeArchiveTooManyEntries), "the checkout has more than %d entries", lim.MaxEntries)
	}
	if total > lim.MaxBytes+lim.MaxBytes/2 { // .git's objects come on top of the tree's bytes
		return entries, total, errf(string(actuation.CodeArchiveTooLarge), "the checkout holds %d bytes, above %d", total, lim.MaxBytes)
	}
	return entries, total, nil
}

var _ = io.EOF
