package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/webhooks"
)

// TestLoad puts many sessions and commands on one node agent process whose caps are raised
// by configuration, and checks: no lost outcome (every command ends in exactly one),
// overload is refused with its code (sessions above the cap: session-cap-reached; commands
// above the concurrency cap: command-cap-reached) and never queued without bound, and the
// agent's memory is reported before, under and after the load, with the time per command.
//
// CI-sized by default (WB_LOAD_SESSIONS=10, WB_LOAD_COMMANDS=150); the full size
// is WB_LOAD_SESSIONS=200 WB_LOAD_COMMANDS=10000.
func TestLoad(t *testing.T) {
	const node = "node-load"
	sessions, commands := envInt("WB_LOAD_SESSIONS", 10), envInt("WB_LOAD_COMMANDS", 150)
	ctx := context.Background()
	bin := buildAgent(t)
	user, err := env.Env.AddUser(crenvtest.User{Name: webhooks.NodeUserPrefix + node, Groups: []string{webhooks.NodeGroup}}, nil)
	must(t, err)
	kc, err := user.KubeConfig()
	must(t, err)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	must(t, os.WriteFile(kubeconfig, kc, 0o600))
	must(t, env.Bind(ctx, "workbench-node-agent", webhooks.NodeUserPrefix+node, ""))
	state, root := t.TempDir(), t.TempDir()
	config := filepath.Join(t.TempDir(), "node-agent.yaml")
	must(t, os.WriteFile(config, []byte(fmt.Sprintf("nodeName: %s\nstateDir: %s\nadmittedRoots:\n  load: %s\nheartbeatSeconds: 2\n"+
		"recordRetentionSeconds: 2\ncaps:\n  sessions: %d\n  sessionsPerEnvironment: %d\n  concurrentCommands: 8\n  eventBufferDepth: 200\n",
		node, state, root, sessions, sessions)), 0o600))
	p := startAgentProcess(t, bin, kubeconfig, config)
	defer func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Wait()
	}()
	ns := namespace(t)
	readyEnvironmentOn(t, ns, root, node) // session "s" is the first of the cap
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/echo", nil, []string{"load-"})))
	rssBefore := rssKiB(p.cmd.Process.Pid)

	// Sessions up to the cap open ("s" and s1..), the two above it are refused with the cap's
	// code: at admission when the node's published free capacity already says so (429),
	// else by the node.
	admissionRefused := 0
	for i := 1; i < sessions+2; i++ {
		err := env.Client.Create(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d", i), Namespace: ns},
			Spec: wbv1.TerminalSessionSpec{EnvironmentRef: "e"}})
		if apierrors.IsTooManyRequests(err) &&
			strings.Contains(err.Error(), string(actuation.CodeSessionCapReached)) {
			admissionRefused++
			continue
		}
		must(t, err)
	}
	open, refusedSessions := 0, 0
	eventually(t, 120*time.Second, "every session open or refused at the cap", func() (bool, string) {
		var list wbv1.TerminalSessionList
		must(t, env.Client.List(ctx, &list, client.InNamespace(ns)))
		open, refusedSessions = 0, 0
		for _, s := range list.Items {
			switch {
			case s.Status.Phase == wbv1.SessionRunning:
				open++
			case s.Status.Phase == wbv1.SessionFailed && s.Status.Refusal != nil && s.Status.Refusal.Code == string(actuation.CodeSessionCapReached):
				refusedSessions++
			}
		}
		refusedSessions += admissionRefused
		return open+refusedSessions == sessions+2, fmt.Sprintf("open %d refused %d (%d at admission) of %d", open, refusedSessions, admissionRefused, sessions+2)
	})
	if open != sessions || refusedSessions != 2 {
		t.Fatalf("sessions: %d open (cap %d), %d refused", open, sessions, refusedSessions)
	}

	start := time.Now()
	for i := 0; i < commands; i++ {
		c := command(ns, fmt.Sprintf("c%d", i), "/bin/echo", fmt.Sprintf("load-%d", i))
		c.Spec.SessionRef = wbv1.ObjectName(fmt.Sprintf("s%d", i%sessions))
		if i%sessions == 0 {
			c.Spec.SessionRef = "s"
		}
		must(t, env.Client.Create(ctx, c))
	}
	outcomes := map[string]int{}
	var rssPeak int64
	eventually(t, time.Duration(commands)*200*time.Millisecond+60*time.Second, "every command's one outcome", func() (bool, string) {
		// Paged: one list of 10,000 commands with their status is a response the API
		// server may cut (a stream error); a failed page is retried on the next poll.
		var items []wbv1.TerminalCommand
		for cont := ""; ; {
			var list wbv1.TerminalCommandList
			if err := env.Client.List(ctx, &list, client.InNamespace(ns), client.Limit(500), client.Continue(cont)); err != nil {
				return false, "listing commands: " + err.Error()
			}
			items = append(items, list.Items...)
			if cont = list.Continue; cont == "" {
				break
			}
		}
		final := 0
		outcomes = map[string]int{}
		for _, c := range items {
			if wbv1.CommandIsFinal(c.Status.Conditions) && c.Status.Phase == wbv1.CommandPhaseFor(c.Status.Conditions) {
				final++
				k := string(c.Status.Phase)
				if c.Status.Refusal != nil {
					k += "/" + c.Status.Refusal.Code
				}
				outcomes[k]++
			}
		}
		rssPeak = max(rssPeak, rssKiB(p.cmd.Process.Pid))
		return final == commands, fmt.Sprintf("%d of %d final: %v", final, commands, outcomes)
	})
	elapsed := time.Since(start)
	for k, n := range outcomes {
		if k != string(wbv1.CommandSucceeded) && k != string(wbv1.CommandRefused)+"/"+string(actuation.CodeCommandCapReached) {
			t.Errorf("%d commands ended %s: only success or the concurrency cap's refusal are expected", n, k)
		}
	}
	rssAfter := rssKiB(p.cmd.Process.Pid)
	t.Logf("load: %d sessions (+2 refused at the cap), %d commands in %s (%.1f ms per command), outcomes %v; agent RSS %d KiB before, %d KiB peak, %d KiB after",
		sessions, commands, elapsed.Round(time.Millisecond), float64(elapsed.Milliseconds())/float64(commands), outcomes, rssBefore, rssPeak, rssAfter)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// rssKiB reads a process's resident set size (0 when it cannot be read).
func rssKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}
