package nodeagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"

	"sensorium.dev/workbench/internal/test/kstate"
)

// kstatusOf computes what kstatus (the health library behind Flux and apply-and-wait
// tools) reads from obj as the API server returned it.
var kstatusOf = kstate.KStatus

// sampleObject is one object of one file of config/samples, as applied by the test.
type sampleObject struct {
	file string
	obj  *unstructured.Unstructured
}

func (s sampleObject) String() string {
	return fmt.Sprintf("%s %s/%s (%s)", s.obj.GetKind(), s.obj.GetNamespace(), s.obj.GetName(), s.file)
}

// readSamples decodes every YAML document of every file in dir (not recursively; the
// kustomization, which only lists them, excepted).
func readSamples(t *testing.T, dir string) []sampleObject {
	t.Helper()
	ents, err := os.ReadDir(dir)
	must(t, err)
	var out []sampleObject
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") || e.Name() == "kustomization.yaml" {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		must(t, err)
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for {
			var m map[string]any
			err := dec.Decode(&m)
			if errors.Is(err, io.EOF) {
				break
			}
			must(t, err)
			if len(m) == 0 {
				continue
			}
			out = append(out, sampleObject{file: filepath.Join(filepath.Base(dir), e.Name()), obj: &unstructured.Unstructured{Object: m}})
		}
	}
	return out
}

// demoRepository makes dir what `make run-local` makes the samples' workspace: a small git
// repository with README.md and NOTES.md (the sample patch appends to NOTES.md).
func demoRepository(t *testing.T, dir string) {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("# demo\n\nA workspace of the embedded default.\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "NOTES.md"), []byte("Notes.\n"), 0o644))
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "user.name=workbench", "-c", "user.email=workbench@localhost", "commit", "-qm", "demo"}} {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

// TestSamplesThroughKStatus applies every object of every file in config/samples (and
// config/samples/vm where this node runs qemu-microvm.v1) to the real API server, as
// `make run-local` does, with the manager and the node agent acting on them, and reads
// each through kstatus until it is Current for the generation the product observed (kstatus
// reads a fresh object with no status yet as Current; the test waits for
// status.observedGeneration). Only two samples wait for a person, and they
// must read InProgress — never Current — while they wait: the command held AwaitingConsent
// (until an operator's ConsentGrant) and the patch AwaitingApproval (until an operator
// approves it). Anything else that is not Current within the deadline, and anything that
// reads Failed, Terminating or Unknown, fails the test. The objects the product made on the
// way (the ConsentRequest, the operator's ConsentGrant) and the node's own WorkbenchNode
// read Current too.
func TestSamplesThroughKStatus(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	dir := workDir(t)
	demoRepository(t, dir)
	const samplesHostPath = "/var/lib/workbench/workspaces/demo"

	samples := readSamples(t, filepath.Join(repoRoot(), "config", "samples"))
	if qemuSkip == "" {
		applyImageManifest(t) // what make run-local registers before config/samples/vm
		samples = append(samples, readSamples(t, filepath.Join(repoRoot(), "config", "samples", "vm"))...)
	} else {
		t.Logf("config/samples/vm not applied: %s", qemuSkip)
	}
	if len(samples) == 0 {
		t.Fatal("no samples in config/samples")
	}
	kinds := map[string]bool{}
	for _, s := range samples {
		o := s.obj
		kinds[o.GetKind()] = true
		mapping, err := env.Client.RESTMapper().RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
		must(t, err)
		if mapping.Scope.Name() == "namespace" {
			o.SetNamespace(ns)
		}
		if o.GetKind() == "Environment" {
			// The samples' workspace is this test's directory, on this suite's node.
			roots, _, _ := unstructured.NestedSlice(o.Object, "spec", "roots")
			for _, r := range roots {
				if m, ok := r.(map[string]any); ok && m["hostPath"] == samplesHostPath {
					m["hostPath"] = dir
				}
			}
			if len(roots) > 0 {
				must(t, unstructured.SetNestedSlice(o.Object, roots, "spec", "roots"))
			}
			must(t, unstructured.SetNestedStringMap(o.Object, map[string]string{wbv1.NodeLabel: nodeName}, "spec", "nodeSelector"))
		}
		err = env.Client.Create(ctx, o)
		switch {
		case err == nil:
		case apierrors.IsAlreadyExists(err) && mapping.Scope.Name() != "namespace":
			// A cluster-scoped sample another test (or applyImageManifest) registered:
			// read what is there.
			t.Logf("%s exists already; reading it", s)
		default:
			t.Fatalf("applying %s: %v", s, err)
		}
	}
	for _, k := range []string{"CommandProfile", "Environment", "TerminalSession", "TerminalCommand", "Wait", "Probe", "FilePatch"} {
		if !kinds[k] {
			t.Errorf("config/samples has no %s any more: this test's expectations need a look", k)
		}
	}

	must(t, env.Bind(ctx, "workbench-operator", "sam-operator", ns))
	op, err := env.As("sam-operator")
	must(t, err)
	held := map[string]bool{} // objects seen waiting for a person, and released
	release := func(s sampleObject, res *kstatus.Result) (bool, error) {
		o := s.obj
		switch o.GetKind() {
		case "TerminalCommand":
			if phase, _, _ := unstructured.NestedString(o.Object, "status", "phase"); phase != string(wbv1.CommandAwaitingConsent) {
				return false, nil
			}
			if res.Status != kstatus.InProgressStatus {
				return false, fmt.Errorf("%s is held AwaitingConsent but kstatus reads %s (%s), want InProgress", s, res.Status, res.Message)
			}
			ref, _, _ := unstructured.NestedString(o.Object, "status", "consentRequestRef")
			if ref == "" || held[s.String()] {
				return ref != "", nil
			}
			held[s.String()] = true
			g := &wbv1.ConsentGrant{ObjectMeta: metav1.ObjectMeta{Name: "allow-" + o.GetName(), Namespace: ns},
				Spec: wbv1.ConsentGrantSpec{RequestRef: wbv1.ObjectName(ref), Scope: wbv1.ConsentRememberExactArgv}}
			return true, op.Create(ctx, g)
		case "FilePatch":
			if phase, _, _ := unstructured.NestedString(o.Object, "status", "phase"); phase != string(wbv1.FilePatchAwaitingApproval) {
				return false, nil
			}
			if res.Status != kstatus.InProgressStatus {
				return false, fmt.Errorf("%s is AwaitingApproval but kstatus reads %s (%s), want InProgress", s, res.Status, res.Message)
			}
			if held[s.String()] {
				return true, nil
			}
			held[s.String()] = true
			return true, retry.RetryOnConflict(retry.DefaultRetry, func() error {
				var fp wbv1.FilePatch
				if err := op.Get(ctx, client.ObjectKey{Namespace: ns, Name: o.GetName()}, &fp); err != nil {
					return err
				}
				fp.Spec.Approval = "Approved"
				return op.Update(ctx, &fp)
			})
		}
		return false, nil
	}

	timeout := 2 * time.Minute
	if qemuSkip == "" {
		timeout = 5 * time.Minute // a guest boots under TCG
	}
	deadline := time.Now().Add(timeout)
	for {
		var pending []string
		for _, s := range samples {
			o := s.obj
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(o.GroupVersionKind())
			get(t, o.GetNamespace(), o.GetName(), got)
			s.obj.Object = got.Object
			res, err := kstatus.Compute(got)
			must(t, err)
			switch res.Status {
			case kstatus.CurrentStatus:
				if observed(got) {
					continue
				}
				// kstatus reads an object nothing has written status for yet as Current: wait
				// until the product has observed this generation.
				pending = append(pending, fmt.Sprintf("%s: status not yet written for generation %d: %v", s, got.GetGeneration(), got.Object["status"]))
			case kstatus.InProgressStatus:
				if o.GetKind() == "ImageManifest" && qemuSkip != "" && observed(got) {
					// No node here boots qemu-microvm.v1, so none verifies the image: it reads
					// InProgress (never Current) with its generation observed (issue 30 item 7).
					continue
				}
				waiting, err := release(s, res)
				if err != nil {
					t.Fatal(err)
				}
				if waiting {
					pending = append(pending, fmt.Sprintf("%s: waits for an operator (InProgress: %s)", s, res.Message))
				} else {
					pending = append(pending, fmt.Sprintf("%s: InProgress: %s; status %v", s, res.Message, got.Object["status"]))
				}
			default:
				t.Fatalf("%s reads %s through kstatus (%s); status %v", s, res.Status, res.Message, got.Object["status"])
			}
		}
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("samples not Current after %s:\n  %s", timeout, strings.Join(pending, "\n  "))
		}
		time.Sleep(200 * time.Millisecond)
	}
	var names []string
	for k := range held {
		names = append(names, k)
	}
	sort.Strings(names)
	if len(names) != 2 {
		t.Fatalf("want the consent sample and the patch sample held for an operator (InProgress) on the way, saw %v", names)
	}

	// What the product made on the way, and the node itself.
	var reqs wbv1.ConsentRequestList
	must(t, env.Client.List(ctx, &reqs, client.InNamespace(ns)))
	var grants wbv1.ConsentGrantList
	must(t, env.Client.List(ctx, &grants, client.InNamespace(ns)))
	if len(reqs.Items) == 0 || len(grants.Items) == 0 {
		t.Fatalf("no ConsentRequest (%d) or ConsentGrant (%d) in the samples' namespace", len(reqs.Items), len(grants.Items))
	}
	var others []client.Object
	for i := range reqs.Items {
		others = append(others, &reqs.Items[i])
	}
	for i := range grants.Items {
		others = append(others, &grants.Items[i])
	}
	var node wbv1.WorkbenchNode
	get(t, "", nodeName, &node)
	others = append(others, &node)
	for _, o := range others {
		eventually(t, 30*time.Second, fmt.Sprintf("%T %s Current", o, o.GetName()), func() (bool, string) {
			refresh(t, o)
			res := kstatusOf(t, o)
			return res.Status == kstatus.CurrentStatus, fmt.Sprintf("%s: %s", res.Status, res.Message)
		})
	}
}

// observed says the product has written o's status for its current generation:
// status.observedGeneration equals metadata.generation (every kind has it).
func observed(o *unstructured.Unstructured) bool {
	g, found, err := unstructured.NestedInt64(o.Object, "status", "observedGeneration")
	return err == nil && found && g == o.GetGeneration()
}

// TestTerminalOutcomesThroughKStatus produces, with the real manager and node agent, every
// terminal outcome a TerminalCommand, a TerminalSession and an Environment can reach here,
// and reads each through kstatus: only the outcome that was asked for (a command that
// Succeeded) is Current; a command that Failed (exit status 1), TimedOut, was Cancelled,
// was Refused at admission or Refused because its consent was denied, a session that
// Failed (its shell profile admits no PTY) or whose program ended without being asked to
// close, and an environment that Failed (its root is outside what the node admits) all
// read Failed — never Current, never InProgress forever. While a command is held for
// consent it reads InProgress. (Timed-out waits, failed probes and rejected patches are
// read the same way in waits_test.go and patch_test.go; commands and sessions interrupted
// by a node restart in crash_test.go; expired consent in test/integration.)
func TestTerminalOutcomesThroughKStatus(t *testing.T) {
	ctx := context.Background()
	ns, _ := readyWorkEnvironment(t)
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/sleep", nil, []string{"0", "30"}, func(s *wbv1.CommandProfileSpec) {
		s.ConsentPrompting = wbv1.ConsentPromptingForbidden
	})))
	must(t, env.Client.Create(ctx, profile(ns, "f", "/bin/false", nil, nil)))
	must(t, env.Client.Create(ctx, profile(ns, "q", "/bin/echo", nil, []string{"ok"})))
	must(t, env.Client.Create(ctx, profile(ns, "pty-exits", "/bin/true", nil, nil, func(s *wbv1.CommandProfileSpec) { s.PTY = "Allowed" })))

	cmd := func(name, profile string, timeout int64, argv ...string) {
		c := command(ns, name, argv...)
		c.Spec.ProfileRef = wbv1.ObjectName(profile)
		c.Spec.TimeoutSeconds = timeout
		must(t, env.Client.Create(ctx, c))
	}
	cmd("ok", "p", 20, "/bin/sleep", "0")
	cmd("exit-1", "f", 20, "/bin/false")
	cmd("timed-out", "p", 1, "/bin/sleep", "30")
	cmd("cancelled", "p", 30, "/bin/sleep", "30")
	cmd("refused", "p", 20, "/bin/sleep", "5")        // not admitted, prompting forbidden
	cmd("consent-denied", "q", 20, "/bin/echo", "no") // not admitted: held for consent

	eventually(t, 30*time.Second, "command cancelled Running", func() (bool, string) {
		var c wbv1.TerminalCommand
		get(t, ns, "cancelled", &c)
		return c.Status.Phase == wbv1.CommandRunning, fmt.Sprintf("%+v", c.Status)
	})
	update(t, env.Client, ns, "cancelled", func(c *wbv1.TerminalCommand) { c.Spec.DesiredState = wbv1.CommandDesiredCancelled })

	var held wbv1.TerminalCommand
	eventually(t, 30*time.Second, "command consent-denied AwaitingConsent", func() (bool, string) {
		get(t, ns, "consent-denied", &held)
		return held.Status.Phase == wbv1.CommandAwaitingConsent && held.Status.ConsentRequestRef != "", fmt.Sprintf("%+v", held.Status)
	})
	if res := kstatusOf(t, &held); res.Status != kstatus.InProgressStatus {
		t.Fatalf("a command held for consent reads %s (%s), want InProgress", res.Status, res.Message)
	}
	must(t, env.Bind(ctx, "workbench-operator", "out-operator", ns))
	op, err := env.As("out-operator")
	must(t, err)
	must(t, op.Create(ctx, &wbv1.ConsentGrant{ObjectMeta: metav1.ObjectMeta{Name: "deny", Namespace: ns},
		Spec: wbv1.ConsentGrantSpec{RequestRef: wbv1.ObjectName(held.Status.ConsentRequestRef), Scope: wbv1.ConsentDeny}}))

	for _, tc := range []struct {
		name  string
		phase wbv1.CommandPhase
		want  kstatus.Status
	}{
		{"ok", wbv1.CommandSucceeded, kstatus.CurrentStatus},
		{"exit-1", wbv1.CommandFailed, kstatus.FailedStatus},
		{"timed-out", wbv1.CommandTimedOut, kstatus.FailedStatus},
		{"cancelled", wbv1.CommandCancelled, kstatus.FailedStatus},
		{"refused", wbv1.CommandRefused, kstatus.FailedStatus},
		{"consent-denied", wbv1.CommandRefused, kstatus.FailedStatus},
	} {
		c := waitFinal(t, ns, tc.name)
		if c.Status.Phase != tc.phase {
			t.Errorf("command %s: phase %s, want %s (status %+v)", tc.name, c.Status.Phase, tc.phase, c.Status)
			continue
		}
		// The manager writes the health conditions with the phase it derives.
		eventually(t, 30*time.Second, "command "+tc.name+" reads "+string(tc.want), func() (bool, string) {
			refresh(t, c)
			res := kstatusOf(t, c)
			return res.Status == tc.want, fmt.Sprintf("%s (%s); status %+v", res.Status, res.Message, c.Status)
		})
	}

	// Sessions: a shell profile that admits no PTY (Failed), a PTY program that ends by
	// itself although nobody asked the session to close.
	must(t, env.Client.Create(ctx, session(ns, "no-pty", "e", func(s *wbv1.TerminalSessionSpec) { s.ShellProfileRef = ptr(wbv1.ObjectName("p")) })))
	must(t, env.Client.Create(ctx, session(ns, "ends", "e", func(s *wbv1.TerminalSessionSpec) { s.ShellProfileRef = ptr(wbv1.ObjectName("pty-exits")) })))
	for _, name := range []string{"no-pty", "ends"} {
		var s wbv1.TerminalSession
		eventually(t, 60*time.Second, "session "+name+" ends and reads Failed", func() (bool, string) {
			get(t, ns, name, &s)
			res := kstatusOf(t, &s)
			return wbv1.SessionPhaseIsFinal(s.Status.Phase) && res.Status == kstatus.FailedStatus,
				fmt.Sprintf("%s (%s); status %+v", res.Status, res.Message, s.Status)
		})
		if name == "no-pty" && s.Status.Phase != wbv1.SessionFailed {
			t.Errorf("session no-pty: phase %s, want Failed", s.Status.Phase)
		}
	}
	// A session asked to close is where its spec wants it: Current.
	askSessionClosed(t, ns, "s")
	eventually(t, 60*time.Second, "session s closed as asked reads Current", func() (bool, string) {
		var s wbv1.TerminalSession
		get(t, ns, "s", &s)
		res := kstatusOf(t, &s)
		return s.Status.Phase == wbv1.SessionClosed && res.Status == kstatus.CurrentStatus, fmt.Sprintf("%s (%s); status %+v", res.Status, res.Message, s.Status)
	})

	// An environment whose root the node does not admit.
	outside := t.TempDir()
	must(t, env.Client.Create(ctx, hostEnvironment(ns, "outside", outside, nodeName)))
	eventually(t, 60*time.Second, "environment outside Failed and read Failed", func() (bool, string) {
		var e wbv1.Environment
		get(t, ns, "outside", &e)
		res := kstatusOf(t, &e)
		return e.Status.Phase == wbv1.EnvironmentFailed && res.Status == kstatus.FailedStatus, fmt.Sprintf("%s (%s); status %+v", res.Status, res.Message, e.Status)
	})
}

// wantKStatusFailed fails unless kstatus reads obj (a terminal outcome that is not what was
// asked for) as Failed.
func wantKStatusFailed(t *testing.T, obj runtime.Object) {
	t.Helper()
	wantKStatus(t, obj, kstatus.FailedStatus)
}
