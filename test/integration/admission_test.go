package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/kstate"
)

// TestAdmissionRefusals sends each malformed manifest class through the API server and
// checks that it is refused with its stable code.
func TestAdmissionRefusals(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	must(t, env.Client.Create(ctx, profile(ns, "git", func(s *wbv1.CommandProfileSpec) {
		s.Env.Mode = "AllowlistedOverrides"
		s.Env.AllowedOverrides = []string{"TZ"}
	})))
	cmd := func(mut func(*wbv1.TerminalCommand)) client.Object {
		c := command(ns, "c", "/usr/bin/git", "--no-pager", "status")
		mut(c)
		return c
	}
	prof := func(mut func(*wbv1.CommandProfileSpec)) client.Object { return profile(ns, "p", mut) }
	cases := []struct {
		name string
		obj  client.Object
		code string
	}{
		{"cwd traversal", cmd(func(c *wbv1.TerminalCommand) { c.Spec.Cwd.Path = "src/../../etc" }), "path-traversal"},
		{"cwd absolute", cmd(func(c *wbv1.TerminalCommand) { c.Spec.Cwd.Path = "/etc" }), "path-absolute"},
		{"cwd backslash", cmd(func(c *wbv1.TerminalCommand) { c.Spec.Cwd.Path = `a\b` }), "path-invalid-character"},
		{"argv shell string", cmd(func(c *wbv1.TerminalCommand) { c.Spec.Argv = []string{"git status; rm -rf /"} }), "shell-string"},
		{"forbidden env key LD_PRELOAD", cmd(func(c *wbv1.TerminalCommand) { c.Spec.Env = []wbv1.EnvVar{{Name: "LD_PRELOAD", Value: "/tmp/x.so"}} }), "env-key-forbidden"},
		{"forbidden env key SSH_AUTH_SOCK", cmd(func(c *wbv1.TerminalCommand) {
			c.Spec.Env = []wbv1.EnvVar{{Name: "SSH_AUTH_SOCK", Value: "/tmp/agent"}}
		}), "env-key-forbidden"},
		{"env override not in profile", cmd(func(c *wbv1.TerminalCommand) { c.Spec.Env = []wbv1.EnvVar{{Name: "LANG", Value: "C"}} }), "env-override-not-allowed"},
		{"timeout above profile max", cmd(func(c *wbv1.TerminalCommand) { c.Spec.TimeoutSeconds = 121 }), "timeout-above-max"},
		{"output above profile max", cmd(func(c *wbv1.TerminalCommand) { c.Spec.OutputBytes = 2 << 20 }), "output-cap-above-max"},
		{"cwd root not allowed", cmd(func(c *wbv1.TerminalCommand) { c.Spec.Cwd.Root = "other" }), "root-not-allowed"},
		{"profile shell", prof(func(s *wbv1.CommandProfileSpec) { s.Executable = "/bin/sh"; s.FixedArgs = []string{"-c"} }), "shell-string"},
		{"profile bash", prof(func(s *wbv1.CommandProfileSpec) { s.Executable = "/usr/bin/bash"; s.FixedArgs = nil }), "shell-string"},
		{"profile python -c", prof(func(s *wbv1.CommandProfileSpec) { s.Executable = "/usr/bin/python3"; s.FixedArgs = []string{"-c"} }), "shell-string"},
		{"profile python open prefix", prof(func(s *wbv1.CommandProfileSpec) {
			s.Executable = "/usr/bin/python3"
			s.AllowedArgPrefixes = []string{"-"}
		}), "shell-string"},
		{"profile relative executable", prof(func(s *wbv1.CommandProfileSpec) { s.Executable = "git" }), "executable-not-absolute"},
		{"profile empty roots", prof(func(s *wbv1.CommandProfileSpec) { s.AllowedRoots = nil }), "profile-roots-empty"},
		{"profile forbidden default env", prof(func(s *wbv1.CommandProfileSpec) {
			s.Env.Defaults = []wbv1.EnvVar{{Name: "AWS_SECRET_ACCESS_KEY", Value: "x"}}
		}), "env-key-forbidden"},
		{"profile forbidden override", prof(func(s *wbv1.CommandProfileSpec) {
			s.Env.Mode = "AllowlistedOverrides"
			s.Env.AllowedOverrides = []string{"NODE_OPTIONS"}
		}), "env-key-forbidden"},
		{"profile empty prefix", prof(func(s *wbv1.CommandProfileSpec) { s.AllowedArgPrefixes = []string{""} }), "profile-invalid"},
		{"oversized summary", &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
			Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "r", HostPath: ptr("/srv/x")}},
			OperationalContext: &wbv1.OperationalContext{Class: "test", Summary: ptr(strings.Repeat("é", 300))},
		}}, "summary-too-large"},
		{"host-local root without hostPath", &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "nohp", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
			Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "r"}},
		}}, "root-invalid"},
		{"relative hostPath", &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "relhp", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
			Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "r", HostPath: ptr("srv/../x")}},
		}}, "root-invalid"},
		{"VM root with host share", &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "vmshare", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
			Backend: wbv1.BackendQEMUMicroVM, Roots: []wbv1.EnvironmentRoot{{Name: "r", HostPath: ptr("/srv/x")}},
		}}, "root-invalid"},
		{"unknown vocabulary value", &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "vocab", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
			Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "r", HostPath: ptr("/srv/x")}},
			Requirements: &wbv1.EnvironmentRequirements{IsolationClass: ptr(wbv1.IsolationClass("microvm-ish"))},
		}}, "Unsupported value"},
		{"wait without scope", &wbv1.Wait{ObjectMeta: metav1.ObjectMeta{Name: "w1", Namespace: ns}, Spec: wbv1.WaitSpec{
			Condition: wbv1.WaitCondition{Kind: wbv1.ConditionKindCommandDone}, DeadlineSeconds: 10}}, "spec.scope: Required value"},
		{"probe without scope", &wbv1.Probe{ObjectMeta: metav1.ObjectMeta{Name: "p0", Namespace: ns}, Spec: wbv1.ProbeSpec{
			Condition: wbv1.WaitCondition{Kind: wbv1.ConditionKindFileExists}}}, "spec.scope: Required value"},
		{"wait with two scopes", &wbv1.Wait{ObjectMeta: metav1.ObjectMeta{Name: "w2", Namespace: ns}, Spec: wbv1.WaitSpec{
			Scope:     &wbv1.Scope{CommandRef: ptr(wbv1.ObjectName("c")), SessionRef: ptr(wbv1.ObjectName("s"))},
			Condition: wbv1.WaitCondition{Kind: wbv1.ConditionKindCommandDone}, DeadlineSeconds: 10}}, "wait-scope-invalid"},
		{"wait beyond deadline bound", &wbv1.Wait{ObjectMeta: metav1.ObjectMeta{Name: "w3", Namespace: ns}, Spec: wbv1.WaitSpec{
			Scope:     &wbv1.Scope{CommandRef: ptr(wbv1.ObjectName("c"))},
			Condition: wbv1.WaitCondition{Kind: wbv1.ConditionKindCommandDone}, DeadlineSeconds: 7200}}, "deadline-above-max"},
		{"wait scope does not fit condition", &wbv1.Wait{ObjectMeta: metav1.ObjectMeta{Name: "w4", Namespace: ns}, Spec: wbv1.WaitSpec{
			Scope:     &wbv1.Scope{SessionRef: ptr(wbv1.ObjectName("s"))},
			Condition: wbv1.WaitCondition{Kind: wbv1.ConditionKindFileExists}, DeadlineSeconds: 10}}, "wait-scope-invalid"},
		{"wait file traversal", &wbv1.Wait{ObjectMeta: metav1.ObjectMeta{Name: "w5", Namespace: ns}, Spec: wbv1.WaitSpec{
			Scope:     &wbv1.Scope{File: &wbv1.FileRef{EnvironmentRef: "e", Root: "repo", Path: "../secret"}},
			Condition: wbv1.WaitCondition{Kind: wbv1.ConditionKindFileExists}, DeadlineSeconds: 10}}, "path-traversal"},
		{"probe bad pattern", &wbv1.Probe{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: ns}, Spec: wbv1.ProbeSpec{
			Scope:     &wbv1.Scope{SessionRef: ptr(wbv1.ObjectName("s"))},
			Condition: wbv1.WaitCondition{Kind: wbv1.ConditionKindOutputMatches, Pattern: ptr("a(")}}}, "wait-scope-invalid"},
		{"patch digest mismatch", &wbv1.FilePatch{ObjectMeta: metav1.ObjectMeta{Name: "fp1", Namespace: ns}, Spec: wbv1.FilePatchSpec{
			EnvironmentRef: "e", Root: "repo", Format: wbv1.PatchFormatUnified, Patch: ptr("--- a/x\n+++ b/x\n"),
			Digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000"}}, "digest-mismatch"},
		{"patch outside root", &wbv1.FilePatch{ObjectMeta: metav1.ObjectMeta{Name: "fp2", Namespace: ns}, Spec: wbv1.FilePatchSpec{
			EnvironmentRef: "e", Root: "repo", Format: wbv1.PatchFormatStructured,
			Operations: []wbv1.FileOperation{{Op: "replace", Path: "../../etc/passwd", Content: ptr("x")}},
			Digest:     "sha256:0000000000000000000000000000000000000000000000000000000000000000"}}, "patch-outside-root"},
		{"patch unexpected delete", &wbv1.FilePatch{ObjectMeta: metav1.ObjectMeta{Name: "fp3", Namespace: ns}, Spec: wbv1.FilePatchSpec{
			EnvironmentRef: "e", Root: "repo", Format: wbv1.PatchFormatStructured,
			Operations: []wbv1.FileOperation{{Op: "delete", Path: "README.md"}},
			Digest:     "sha256:0000000000000000000000000000000000000000000000000000000000000000"}}, "patch-delete-forbidden"},
		{"capability unknown storage format", &wbv1.BackendCapability{ObjectMeta: metav1.ObjectMeta{Name: "bad-cap"}, Spec: func() wbv1.BackendCapabilitySpec {
			s := hostLocalCapability("n-bad").Spec
			s.StorageFormats = []string{"qcow9"}
			return s
		}()}, "Unsupported value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mustRefuse(t, env.Client.Create(ctx, tc.obj), tc.code)
		})
	}
}

// TestCommandSpecImmutable checks the CEL rule on TerminalCommand.
func TestCommandSpecImmutable(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	c := command(ns, "c", "/usr/bin/git", "--no-pager", "status")
	must(t, env.Client.Create(ctx, c))
	// The manager writes the command's status meanwhile: retry on a stale resource version.
	err := kstate.Update(env.Client, ns, "c", c, func(c *wbv1.TerminalCommand) { c.Spec.Argv = append(c.Spec.Argv, "--short") })
	mustRefuse(t, err, "immutable")
}

// TestAdmissionWebhookCacheMissIsNotAdmission: the TerminalCommand webhook reads the profile
// from the manager's informer cache, so it may judge a command against a profile older than
// the API server's, or (the extreme of staleness) one it has not seen at all. Either way what
// it lets through is only not refused early: the gate re-checks the same rules against the
// live profile before anything is admitted. Here the webhook cannot see the profile (it does
// not exist yet) and lets a timeout through that the profile, once it exists, refuses; the
// command ends Refused with the profile's code and is never admitted.
func TestAdmissionWebhookCacheMissIsNotAdmission(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	placedSetup(t, ns, "node-a")
	c := command(ns, "early", "/usr/bin/git", "--no-pager", "status")
	c.Spec.ProfileRef, c.Spec.TimeoutSeconds = "later", 100
	must(t, env.Client.Create(ctx, c)) // the webhook saw no profile "later": no early refusal
	must(t, env.Client.Create(ctx, profile(ns, "later", func(s *wbv1.CommandProfileSpec) { s.MaxTimeoutSeconds = 60 })))
	got := waitCommandPhase(t, ns, "early", wbv1.CommandRefused)
	if got.Status.Refusal == nil || got.Status.Refusal.Code != "timeout-above-max" {
		t.Fatalf("refusal = %+v, want timeout-above-max from the live profile", got.Status.Refusal)
	}
	if got.Status.AdmittedBy != "" {
		t.Fatalf("the refused command records an admission by %q", got.Status.AdmittedBy)
	}
	// The same command against the profile the webhook can now see is refused at creation,
	// by the one webhook call a create costs (the binding webhook validates too).
	tries := 0
	eventually(t, 20*time.Second, "the webhook's cache sees profile later", func() (bool, string) {
		tries++
		late := command(ns, fmt.Sprintf("late-%d", tries), "/usr/bin/git", "--no-pager", "status")
		late.Spec.ProfileRef, late.Spec.TimeoutSeconds = "later", 100
		err := env.Client.Create(ctx, late)
		if err == nil {
			return false, "admitted at creation"
		}
		return strings.Contains(err.Error(), "timeout-above-max") && strings.Contains(err.Error(), "mterminalcommand"), err.Error()
	})
}
