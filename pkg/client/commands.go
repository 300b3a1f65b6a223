package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	dpprotocol "sensorium.dev/workbench/internal/dataplane/protocol/v2"
)

// CreatedByLabel marks objects this client created on the caller's behalf (sessions).
const CreatedByLabel = "workbench.sensorium.dev/created-by"

// RunRequest is one structured command to run (the CLI's `run` and the MCP run_command
// tool's input schema).
type RunRequest struct {
	Argv           []string `json:"argv" jsonschema:"argv as data (never a shell string); argv[0] may be the profile's executable or its base name"`
	Environment    string   `json:"environment,omitempty" jsonschema:"Environment to run in (default: the only Ready one)"`
	Session        string   `json:"session,omitempty" jsonschema:"TerminalSession to run on (default: a structured session of the environment, created if needed)"`
	Profile        string   `json:"profile,omitempty" jsonschema:"CommandProfile (default: the one whose executable matches argv[0])"`
	Root           string   `json:"root,omitempty" jsonschema:"root of the working directory (default: the profile's first allowed root the environment has)"`
	Path           string   `json:"path,omitempty" jsonschema:"working directory beneath the root"`
	TimeoutSeconds int64    `json:"timeoutSeconds,omitempty" jsonschema:"timeout, at most the profile's maxTimeoutSeconds"`
	OutputBytes    int64    `json:"outputBytes,omitempty" jsonschema:"output cap in bytes, at most the profile's maxOutputBytes"`
	CorrelationID  string   `json:"correlationID,omitempty" jsonschema:"correlation id threading this command through its consent request, waits and probes (a label value: at most 63 characters of [A-Za-z0-9._-]); generated when empty"`
}

// PrepareCommand resolves r into a TerminalCommand ready to create: the environment, a
// session (created and awaited when none is open), the profile, argv[0] and fixed
// arguments, and the working directory's root.
//
// It asks the API server only what it cannot know: the environment is read once (got by
// name, or taken from the list that picks the default), the sessions of the environment
// are listed once, and the profile lookup runs alongside both; a session is created only
// once the environment is known to exist.
func (c *Client) PrepareCommand(ctx context.Context, r RunRequest) (*wbv1.TerminalCommand, error) {
	if len(r.Argv) == 0 {
		return nil, Usage("run needs an argv after --")
	}
	type profileResult struct {
		p   *wbv1.CommandProfile
		err error
	}
	profc := make(chan profileResult, 1)
	go func() {
		p, err := c.resolveProfile(ctx, r.Profile, r.Argv)
		profc <- profileResult{p, err}
	}()
	profile := func() (*wbv1.CommandProfile, error) { res := <-profc; return res.p, res.err }

	env, session, err := c.resolveEnvironmentAndSession(ctx, r)
	if err != nil {
		<-profc // the lookup ends with ctx or its answer; never left running
		return nil, err
	}
	prof, err := profile()
	if err != nil {
		return nil, err
	}
	argv, err := normalizeArgv(prof, r.Argv)
	if err != nil {
		return nil, err
	}
	root := r.Root
	if root == "" {
		root = defaultRoot(prof, env)
	}
	cmd := &wbv1.TerminalCommand{
		ObjectMeta: metav1.ObjectMeta{GenerateName: commandPrefix(argv), Namespace: c.Namespace},
		Spec: wbv1.TerminalCommandSpec{SessionRef: wbv1.ObjectName(session), ProfileRef: wbv1.ObjectName(prof.Name), Argv: argv,
			Cwd: wbv1.CwdAddress{Root: wbv1.RootName(root), Path: wbv1.RelativePath(r.Path)}, TimeoutSeconds: r.TimeoutSeconds, OutputBytes: r.OutputBytes},
	}
	if r.CorrelationID != "" {
		cmd.Labels = map[string]string{wbv1.CorrelationLabel: r.CorrelationID}
	}
	return cmd, nil
}

// resolveEnvironmentAndSession returns r's environment (read once) and the session to run
// on: r.Session (read once, then its environment), else an open structured session of the
// environment (its sessions listed alongside the environment's read when r names it), else
// a new one.
func (c *Client) resolveEnvironmentAndSession(ctx context.Context, r RunRequest) (*wbv1.Environment, string, error) {
	if r.Session != "" {
		var s wbv1.TerminalSession
		if err := c.Kube.Get(ctx, ctrlclient.ObjectKey{Namespace: c.Namespace, Name: r.Session}, &s); err != nil {
			return nil, "", Wrap("terminalsession "+r.Session, err)
		}
		envName := string(s.Spec.EnvironmentRef)
		var env wbv1.Environment
		if err := c.Kube.Get(ctx, ctrlclient.ObjectKey{Namespace: c.Namespace, Name: envName}, &env); err != nil {
			return nil, "", Wrap("environment "+envName, err)
		}
		return &env, r.Session, nil
	}
	var env *wbv1.Environment
	var open *wbv1.TerminalSession
	if r.Environment == "" {
		e, err := c.defaultEnvironment(ctx)
		if err != nil {
			return nil, "", err
		}
		env = e
		if open, err = c.openSession(ctx, env.Name); err != nil {
			return nil, "", err
		}
	} else {
		type sessionResult struct {
			s   *wbv1.TerminalSession
			err error
		}
		sc := make(chan sessionResult, 1)
		go func() {
			s, err := c.openSession(ctx, r.Environment)
			sc <- sessionResult{s, err}
		}()
		var e wbv1.Environment
		err := c.Kube.Get(ctx, ctrlclient.ObjectKey{Namespace: c.Namespace, Name: r.Environment}, &e)
		sres := <-sc
		if err != nil {
			return nil, "", Wrap("environment "+r.Environment, err)
		}
		if sres.err != nil {
			return nil, "", sres.err
		}
		env, open = &e, sres.s
	}
	if open != nil {
		return env, open.Name, nil
	}
	s, err := c.createSession(ctx, env.Name)
	if err != nil {
		return nil, "", err
	}
	return env, s.Name, nil
}

// commandPrefix is a readable generateName: "run-<base of the executable>-".
func commandPrefix(argv []string) string {
	base := path.Base(argv[0])
	out := make([]rune, 0, len(base))
	for _, r := range base {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			out = append(out, r)
		case r >= 'A' && r <= 'Z':
			out = append(out, r+('a'-'A'))
		default:
			out = append(out, '-')
		}
		if len(out) >= 40 {
			break
		}
	}
	if len(out) == 0 {
		return "run-"
	}
	return "run-" + string(out) + "-"
}

// resolveProfile returns the named profile, or the one whose executable matches argv[0]
// (by full path or base name), preferring one whose fixed arguments argv already carries.
func (c *Client) resolveProfile(ctx context.Context, name string, argv []string) (*wbv1.CommandProfile, error) {
	if name != "" {
		var p wbv1.CommandProfile
		if err := c.Kube.Get(ctx, ctrlclient.ObjectKey{Namespace: c.Namespace, Name: name}, &p); err != nil {
			return nil, Wrap("commandprofile "+name, err)
		}
		return &p, nil
	}
	var match []*wbv1.CommandProfile
	for _, fresh := range []bool{false, true} {
		var l wbv1.CommandProfileList
		if err := c.Kube.List(ctx, &l, ctrlclient.InNamespace(c.Namespace), listFrom(fresh)); err != nil {
			return nil, Wrap("commandprofiles", err)
		}
		for i := range l.Items {
			p := &l.Items[i]
			if p.Spec.Executable == argv[0] || path.Base(p.Spec.Executable) == argv[0] {
				match = append(match, p)
			}
		}
		if len(match) > 0 {
			break
		}
	}
	if len(match) == 0 {
		return nil, &Error{Class: ClassNotFound, Code: "profile-missing", Object: "commandprofiles",
			Message: fmt.Sprintf("no CommandProfile in %s runs %q; name one with -p", c.Namespace, argv[0])}
	}
	for _, p := range match {
		rest := argv[1:]
		if len(rest) >= len(p.Spec.FixedArgs) && slices.Equal(rest[:len(p.Spec.FixedArgs)], p.Spec.FixedArgs) {
			return p, nil
		}
	}
	return match[0], nil
}

// normalizeArgv writes argv[0] as the profile's executable and inserts the profile's fixed
// arguments when argv does not already start with them: `git status` under a profile
// (/usr/bin/git, fixedArgs [--no-pager]) becomes [/usr/bin/git --no-pager status].
// It never rewrites what was asked into something else: argv[0] must be the profile's
// executable, or a bare name (no "/") equal to its base name; any other argv[0] (another
// program, a path to another binary, a subcommand) is refused with argv-not-admitted
// naming the profile's executable, before anything is created.
func normalizeArgv(p *wbv1.CommandProfile, argv []string) ([]string, error) {
	exe := p.Spec.Executable
	if argv[0] != exe && (strings.Contains(argv[0], "/") || path.Base(exe) != argv[0]) {
		return nil, &Error{Class: ClassOf(string(actuation.CodeArgvNotAdmitted)), Code: string(actuation.CodeArgvNotAdmitted), Object: "commandprofiles/" + p.Name,
			Message: fmt.Sprintf("argv[0] %q is not the executable of profile %s (%s): write %s or %s first", argv[0], p.Name, exe, exe, path.Base(exe))}
	}
	out := []string{exe}
	rest := argv[1:]
	if !(len(rest) >= len(p.Spec.FixedArgs) && slices.Equal(rest[:len(p.Spec.FixedArgs)], p.Spec.FixedArgs)) {
		out = append(out, p.Spec.FixedArgs...)
	}
	return append(out, rest...), nil
}

// defaultRoot is the profile's first allowed root that the environment has, else the
// environment's first root.
func defaultRoot(p *wbv1.CommandProfile, e *wbv1.Environment) string {
	for _, r := range p.Spec.AllowedRoots {
		for _, er := range e.Spec.Roots {
			if string(er.Name) == r {
				return r
			}
		}
	}
	if len(e.Spec.Roots) > 0 {
		return string(e.Spec.Roots[0].Name)
	}
	return ""
}

// EnsureSession returns an open structured session of environment env, creating one (and
// waiting until it runs) when there is none.
func (c *Client) EnsureSession(ctx context.Context, env string) (*wbv1.TerminalSession, error) {
	s, err := c.openSession(ctx, env)
	if err != nil || s != nil {
		return s, err
	}
	return c.createSession(ctx, env)
}

// openSession is an open structured session of environment env, or nil (one list).
func (c *Client) openSession(ctx context.Context, env string) (*wbv1.TerminalSession, error) {
	for _, fresh := range []bool{false, true} {
		var l wbv1.TerminalSessionList
		if err := c.Kube.List(ctx, &l, &ctrlclient.ListOptions{Namespace: c.Namespace,
			FieldSelector: fields.OneTermEqualSelector("spec.environmentRef", env)}, listFrom(fresh)); err != nil {
			return nil, Wrap("terminalsessions", err)
		}
		for i := range l.Items {
			s := &l.Items[i]
			// A session with a PTY program or raw input is someone's terminal: only its owner's
			// commands may write into it (session-not-owned), so it is never picked here.
			if s.Spec.ShellProfileRef == nil && s.Spec.RawInput != wbv1.RawInputOperatorOnly && s.Spec.DesiredState != "Closed" && s.DeletionTimestamp == nil &&
				(s.Status.Phase == wbv1.SessionRunning || s.Status.Phase == wbv1.SessionIdle) {
				return s, nil
			}
		}
	}
	return nil, nil
}

// listFrom is where a lookup list is served from. First (fresh false) the API server's
// watch cache as it stands (resourceVersion "0"): a consistent list waits until that cache
// has caught up with etcd, which measured ~40 ms per list while the cluster writes
// (BenchmarkRunTrue, docs/benchmarks.md). A lookup only chooses what the request names:
// the admission webhooks and the node read the session and the profile again and decide,
// so a cache a moment old can cost a refusal, never an authorization. Only when that answer
// finds nothing is the list asked again, consistent (fresh true), so an object created just
// before is still found and no second session is opened for want of a fresh read.
func listFrom(fresh bool) ctrlclient.ListOption {
	if fresh {
		return &ctrlclient.ListOptions{}
	}
	return &ctrlclient.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}
}

// createSession creates a structured session of environment env and waits until it runs.
func (c *Client) createSession(ctx context.Context, env string) (*wbv1.TerminalSession, error) {
	s := &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{GenerateName: env + "-", Namespace: c.Namespace,
		Labels: map[string]string{CreatedByLabel: "kubectl-workbench"}},
		Spec: wbv1.TerminalSessionSpec{EnvironmentRef: wbv1.ObjectName(env)}}
	if err := c.Kube.Create(ctx, s); err != nil {
		return nil, Wrap("terminalsession for environment "+env, err)
	}
	return c.WaitSessionRunning(ctx, s.Name)
}

// WaitSessionRunning waits until session name runs (or refuses with its recorded code).
func (c *Client) WaitSessionRunning(ctx context.Context, name string) (*wbv1.TerminalSession, error) {
	s := &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}
	err := waitFor(ctx, c, s, &wbv1.TerminalSessionList{}, func(s *wbv1.TerminalSession) (bool, error) {
		switch s.Status.Phase {
		case wbv1.SessionRunning, wbv1.SessionIdle:
			return true, nil
		case wbv1.SessionClosed, wbv1.SessionFailed, wbv1.SessionExpired, wbv1.SessionKilled, wbv1.SessionClosing:
			code, msg := "session-closed", "session is "+string(s.Status.Phase)
			if s.Status.Refusal != nil {
				code, msg = s.Status.Refusal.Code, s.Status.Refusal.Message
			}
			return false, refused("terminalsession "+name, code, msg)
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// CreateCommand creates cmd.
func (c *Client) CreateCommand(ctx context.Context, cmd *wbv1.TerminalCommand) error {
	if cmd.Namespace == "" {
		cmd.Namespace = c.Namespace
	}
	return Wrap("terminalcommand "+cmd.Name+cmd.GenerateName, c.Kube.Create(ctx, cmd))
}

// WaitCommand watches command name until until(cmd) holds (nil: until it is final),
// calling onChange on every observed change of phase.
func (c *Client) WaitCommand(ctx context.Context, name string, until func(*wbv1.TerminalCommand) bool, onChange func(*wbv1.TerminalCommand)) (*wbv1.TerminalCommand, error) {
	if until == nil {
		until = func(t *wbv1.TerminalCommand) bool { return wbv1.CommandIsFinal(t.Status.Conditions) }
	}
	cmd := &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}
	var last wbv1.CommandPhase = "-"
	err := waitFor(ctx, c, cmd, &wbv1.TerminalCommandList{}, func(t *wbv1.TerminalCommand) (bool, error) {
		if p := wbv1.CommandPhaseFor(t.Status.Conditions); p != last {
			last = p
			if onChange != nil {
				onChange(t)
			}
		}
		return until(t), nil
	})
	if err != nil {
		return nil, err
	}
	return cmd, nil
}

// ExitError is a command that ran and exited non-zero: the CLI exits with its code.
type ExitError struct {
	Command string
	Code    int
}

func (e *ExitError) Error() string   { return fmt.Sprintf("%s exited with %d", e.Command, e.Code) }
func (e *ExitError) ExitStatus() int { return e.Code }

// CommandOutcomeError is nil for a Succeeded command and otherwise says why it did not
// succeed: *ExitError for a non-zero exit, *Error (with the refusal code) for the rest.
func CommandOutcomeError(cmd *wbv1.TerminalCommand) error {
	obj := "terminalcommand " + cmd.Name
	st := cmd.Status
	phase := wbv1.CommandPhaseFor(st.Conditions)
	if st.Refusal != nil && phase != wbv1.CommandSucceeded {
		e := refused(obj, st.Refusal.Code, st.Refusal.Message)
		switch phase {
		case wbv1.CommandTimedOut:
			e.Class = ClassTimedOut
		case wbv1.CommandCancelled:
			e.Class = ClassCancelled
		}
		return e
	}
	switch phase {
	case wbv1.CommandSucceeded:
		if st.ExitCode != nil && *st.ExitCode != 0 {
			return &ExitError{Command: obj, Code: int(*st.ExitCode)}
		}
		return nil
	case wbv1.CommandFailed:
		if st.ExitCode != nil {
			return &ExitError{Command: obj, Code: int(*st.ExitCode)}
		}
		return &Error{Object: obj, Class: ClassRuntime, Message: "command failed without an exit code"}
	case wbv1.CommandTimedOut:
		return &Error{Object: obj, Class: ClassTimedOut, Message: fmt.Sprintf("command timed out after %ds", cmd.Spec.TimeoutSeconds)}
	case wbv1.CommandCancelled:
		return &Error{Object: obj, Class: ClassCancelled, Message: "command was cancelled"}
	}
	return &Error{Object: obj, Class: ClassInternal, Message: "command is not final: " + string(phase)}
}

// RunOptions steer Run.
type RunOptions struct {
	// Output receives the command's combined output as it runs (nil: not read).
	Output io.Writer
	// LimitBytes bounds the output read (0: the server's bound).
	LimitBytes int64
	// OnCreated is called with the created command.
	OnCreated func(*wbv1.TerminalCommand)
	// OnConsent is called once when the command waits for an operator.
	OnConsent func(*wbv1.TerminalCommand, *ConsentInfo)
	// OnOutputUnavailable is called when the output subresource could not be read.
	OnOutputUnavailable func(error)
	// ReturnAtConsent returns the command (and no error) as soon as it waits for an
	// operator, instead of waiting for the operator's answer.
	ReturnAtConsent bool
}

// Run creates the command of r, follows its output into opts.Output while it runs, and
// returns it once final, with CommandOutcomeError as the error.
func (c *Client) Run(ctx context.Context, r RunRequest, opts RunOptions) (*wbv1.TerminalCommand, error) {
	cmd, err := c.PrepareCommand(ctx, r)
	if err != nil {
		return nil, err
	}
	if err := c.CreateCommand(ctx, cmd); err != nil {
		return nil, err
	}
	if opts.OnCreated != nil {
		opts.OnCreated(cmd)
	}
	return c.FollowCommand(ctx, cmd, opts)
}

// Follow waits for command name: it reports consent once, streams output from the first
// byte once the command has started, and returns the final command.
func (c *Client) Follow(ctx context.Context, name string, opts RunOptions) (*wbv1.TerminalCommand, error) {
	cmd, err := c.GetCommand(ctx, name)
	if err != nil {
		return nil, err
	}
	return c.FollowCommand(ctx, cmd, opts)
}

// FollowCommand is Follow from the state of cmd the caller holds (as created, or as read):
// one watch from cmd's resourceVersion serves the whole wait, so the command is not read
// again. The output is read once the command has started: followed over one stream while
// it runs, or read once when the command is already final; not at all when the final
// status says it wrote nothing (outputDigest recorded and stdoutBytes 0).
func (c *Client) FollowCommand(ctx context.Context, cmd *wbv1.TerminalCommand, opts RunOptions) (*wbv1.TerminalCommand, error) {
	cmd = cmd.DeepCopy()
	name := cmd.Name
	ow := &objectWatch[*wbv1.TerminalCommand]{c: c, obj: cmd, list: &wbv1.TerminalCommandList{}}
	defer ow.stop()
	consentShown := false
	err := ow.until(ctx, func(t *wbv1.TerminalCommand) (bool, error) {
		p := wbv1.CommandPhaseFor(t.Status.Conditions)
		if p == wbv1.CommandAwaitingConsent {
			if opts.ReturnAtConsent {
				return true, nil
			}
			if !consentShown && opts.OnConsent != nil {
				consentShown = true
				opts.OnConsent(t, c.ConsentInfo(ctx, t))
			}
		}
		return p == wbv1.CommandRunning || wbv1.CommandIsFinal(t.Status.Conditions), nil
	})
	if err != nil {
		return nil, err
	}
	phase := wbv1.CommandPhaseFor(cmd.Status.Conditions)
	if phase == wbv1.CommandAwaitingConsent {
		return cmd, nil // ReturnAtConsent
	}
	if opts.Output != nil && phase != wbv1.CommandRefused && !finalWithoutOutput(cmd) {
		var oerr error
		if wbv1.CommandIsFinal(cmd.Status.Conditions) {
			oerr = c.CommandOutput(ctx, name, false, opts.LimitBytes, opts.Output) // one plain read: nothing more will come
		} else {
			oerr = c.CommandOutput(ctx, name, true, opts.LimitBytes, opts.Output)
		}
		if oerr != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if opts.OnOutputUnavailable != nil {
				opts.OnOutputUnavailable(oerr)
			}
		}
	}
	if err := ow.until(ctx, func(t *wbv1.TerminalCommand) (bool, error) { return wbv1.CommandIsFinal(t.Status.Conditions), nil }); err != nil {
		return nil, err
	}
	return cmd, CommandOutcomeError(cmd)
}

// finalWithoutOutput says the final status itself shows the command wrote nothing: the
// node recorded its output accounting (an outputDigest) and zero bytes. A status without
// the accounting says nothing, and the output is read.
func finalWithoutOutput(cmd *wbv1.TerminalCommand) bool {
	return wbv1.CommandIsFinal(cmd.Status.Conditions) && cmd.Status.OutputDigest != "" && cmd.Status.StdoutBytes == 0
}

// CommandOutput copies the combined output of command name from its first byte into w
// (terminalcommands/output). With follow it returns when the command is final. A follow
// runs over the WebSocket stream (a hijacked connection, which kube-apiserver's request
// timeout does not cut) unless PlainFollow is set; whenever a stream ends before the
// command is final (a cut, a proxy's timeout, a bounded wait for the start), it is opened
// again from the byte offset already copied (?offset=N), so w gets every byte once.
func (c *Client) CommandOutput(ctx context.Context, name string, follow bool, limitBytes int64, w io.Writer) error {
	cw := &countingWriter{w: w}
	tail := false // the last read, after the command ended: not a resume
	for opened := 0; ; opened++ {
		if opened > 0 && !tail && c.OnOutputResume != nil {
			c.OnOutputResume(cw.n)
		}
		q := url.Values{}
		if follow {
			q.Set("follow", "true")
		}
		if limitBytes > 0 {
			q.Set("limitBytes", strconv.FormatInt(limitBytes-cw.n, 10))
		}
		if cw.n > 0 {
			q.Set("offset", strconv.FormatInt(cw.n, 10))
		}
		var complete bool
		var err error
		if follow && !c.PlainFollow {
			complete, err = c.outputWebSocket(ctx, name, q, cw)
		} else {
			err = c.outputPlain(ctx, name, q, cw)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !retryableOutput(err) {
			return err
		}
		if complete || !follow || (limitBytes > 0 && cw.n >= limitBytes) {
			return nil
		}
		t, gerr := c.GetCommand(ctx, name)
		if gerr != nil {
			return gerr
		}
		if wbv1.CommandIsFinal(t.Status.Conditions) && err == nil && c.PlainFollow {
			return nil // a plain follow ends when the command does: all of it was sent
		}
		if wbv1.CommandIsFinal(t.Status.Conditions) {
			follow, tail = false, true // one more read from the offset picks up any tail, then stop
		}
	}
}

// retryableOutput says whether an output read ended in a way a new read resumes: a cut
// stream, a bounded wait for the start that ended (command-not-started), or a proxy's
// timeout before the stream opened. The loop ends when the command is final.
func retryableOutput(err error) bool {
	var we *Error
	if isStreamCut(err) || (errors.As(err, &we) && we.Code == "command-not-started") {
		return true
	}
	return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
}

// outputPlain is one plain HTTP read of the output.
func (c *Client) outputPlain(ctx context.Context, name string, q url.Values, w io.Writer) error {
	req := c.stream.Get().AbsPath(c.basePath(), "terminalcommands", name, "output")
	for k := range q {
		req = req.Param(k, q.Get(k))
	}
	rc, err := req.Stream(ctx)
	if err != nil {
		return c.wrapSub(ctx, "terminalcommand "+name+" output", err)
	}
	defer func() { _ = rc.Close() }()
	if _, err := io.Copy(w, rc); err != nil {
		return &streamCut{err}
	}
	return nil
}

// outputWebSocket is one read of the output over the remote command WebSocket protocol.
// complete is true when the server ended the stream with its final status (the command's
// output was all sent).
func (c *Client) outputWebSocket(ctx context.Context, name string, q url.Values, w io.Writer) (bool, error) {
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		return false, fmt.Errorf("parsing API server address %q: %w", c.Config.Host, err)
	}
	u.Path = c.basePath() + "/terminalcommands/" + name + "/output"
	u.RawQuery = q.Encode()
	exec, err := remotecommand.NewWebSocketExecutor(c.Config, http.MethodGet, u.String())
	if err != nil {
		return false, fmt.Errorf("reading output of terminalcommand %s: %w", name, err)
	}
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: w})
	var exitErr utilexec.CodeExitError
	switch {
	case err == nil, errors.As(err, &exitErr), strings.HasPrefix(err.Error(), commandEndedPrefix):
		// The final status arrived: success, the command's exit code, or its end without one.
		return true, nil
	case httpstream.IsUpgradeFailure(err):
		// The handshake was refused: the served status says why (never a cut).
		return false, c.wrapSub(ctx, "terminalcommand "+name+" output", upgradeCause(err))
	}
	return false, &streamCut{err}
}

// commandEndedPrefix starts the final Failure status of an output stream whose command
// ended without an exit code (the data-plane protocol's).
const commandEndedPrefix = dpprotocol.CommandEndedPrefix

// upgradeCause is the served metav1.Status of a refused WebSocket handshake when there is
// one (client-go wraps it in an UpgradeFailureError that does not unwrap), else err.
func upgradeCause(err error) error {
	var uf *httpstream.UpgradeFailureError
	if errors.As(err, &uf) && uf.Cause != nil {
		var st apierrors.APIStatus
		if errors.As(uf.Cause, &st) {
			return uf.Cause
		}
	}
	return err
}

// streamCut marks a stream that ended before its end (connection closed, timeout).
type streamCut struct{ err error }

func (s *streamCut) Error() string { return "output stream cut: " + s.err.Error() }
func (s *streamCut) Unwrap() error { return s.err }

func isStreamCut(err error) bool {
	var sc *streamCut
	return errors.As(err, &sc)
}

// countingWriter counts what reached w.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// ErrAggregatedAPIUnavailable means the subresource API group is not served.
var ErrAggregatedAPIUnavailable = errors.New("the aggregated API " + SubresourcesGroupVersion.String() + " is not served (is workbench-apiserver running and its APIService available?)")

// wrapSub wraps an error of the aggregated API. A 403 or 404 without a workbench code (or a
// failed WebSocket handshake) may mean that the group itself is not served (kube-apiserver
// authorizes before it routes): then discovery tells, and the error says so (class
// unavailable).
func (c *Client) wrapSub(ctx context.Context, object string, err error) error {
	w := Wrap(object, err)
	var e *Error
	if errors.As(w, &e) && e.Code == "" && (e.Class == ClassInternal || apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsServiceUnavailable(err)) && !c.SubresourcesServed(ctx) {
		e.Err = fmt.Errorf("%w: %w", ErrAggregatedAPIUnavailable, err)
		e.Message = ErrAggregatedAPIUnavailable.Error()
		e.Class = ClassUnavailable
	}
	return w
}

// SubresourcesServed asks discovery whether the aggregated API group is served.
func (c *Client) SubresourcesServed(ctx context.Context) bool {
	err := c.Sub.Get().AbsPath("/apis/" + SubresourcesGroupVersion.Group + "/" + SubresourcesGroupVersion.Version).Do(ctx).Error()
	return err == nil
}

// CancelCommand cancels command name (terminalcommands/cancel).
func (c *Client) CancelCommand(ctx context.Context, name string) error {
	err := c.Sub.Post().AbsPath(c.basePath(), "terminalcommands", name, "cancel").Do(ctx).Error()
	return c.wrapSub(ctx, "terminalcommand "+name, err)
}

// GetCommand reads command name.
func (c *Client) GetCommand(ctx context.Context, name string) (*wbv1.TerminalCommand, error) {
	var t wbv1.TerminalCommand
	if err := c.Kube.Get(ctx, ctrlclient.ObjectKey{Namespace: c.Namespace, Name: name}, &t); err != nil {
		return nil, Wrap("terminalcommand "+name, err)
	}
	return &t, nil
}
