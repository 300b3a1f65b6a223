package nodeagent

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/store"
)

// A counted command appends the line of chaos-line to its own counter file (dd, no shell:
// profiles refuse shells); a command that ran twice leaves two lines. Sleepers linger so
// that kills land while processes run.
var chaosCount = []string{"if=chaos-line", "oflag=append", "conv=notrunc", "status=none"}

// chaosSleep is this run's sleeper duration, about 0.7 s, with digits unique to this test
// process: the orphan check looks for this run's sleepers only, never for those of another
// run on the same machine (CI-sized chaos runs of other worktrees share it).
var chaosSleep = fmt.Sprintf("0.7%06d", os.Getpid()%1000000)

// TestChaosKills runs a mixed workload (sessions, commands, waits on them) against a node
// agent process and kills it with SIGKILL at random points (seeded; the seed is printed),
// restarting it each time. At the end: every accepted command and wait has exactly one
// outcome, no command ran twice (a side-effect counter per command), no orphan process or
// temp root is left, and the store agrees with the API server.
//
// CI runs WB_CHAOS_KILLS (default 5) kills; `make chaos` runs 100. WB_CHAOS_SEED replays a run.
func TestChaosKills(t *testing.T) {
	const node = "node-chaos"
	kills := 5
	if v, err := strconv.Atoi(os.Getenv("WB_CHAOS_KILLS")); err == nil && v > 0 {
		kills = v
	}
	seed := time.Now().UnixNano()
	if v, err := strconv.ParseInt(os.Getenv("WB_CHAOS_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("chaos: %d kills, seed %d (replay with WB_CHAOS_SEED=%d)", kills, seed, seed)
	rng := rand.New(rand.NewSource(seed))
	began := time.Now()
	defer func() { t.Logf("chaos: %d kills, seed %d, %s", kills, seed, time.Since(began).Round(time.Second)) }()

	ctx := context.Background()
	na := newAgentNode(t, node, "chaos", "caps:\n  sessions: 64\n  sessionsPerEnvironment: 64\n")
	state, root := na.state, na.root

	agentProc := na.start(t)
	defer func() { agentProc.Stop() }() // agentProc is the running agent when the test ends
	ns := namespace(t)
	readyEnvironmentOn(t, ns, root, node)
	must(t, os.WriteFile(filepath.Join(root, "chaos-line"), []byte("ran\n"), 0o644))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/dd", chaosCount, []string{"of=count-"})))
	must(t, env.Client.Create(ctx, profile(ns, "sleep", "/bin/sleep", nil, []string{chaosSleep})))

	var cmds, sleepers, waitNames []string
	sess := "s"
	for k := 0; k < kills; k++ {
		// A fresh session after every restart: the previous one was interrupted.
		if k > 0 {
			sess = fmt.Sprintf("s%d", k)
			must(t, env.Client.Create(ctx, session(ns, sess, "e")))
		}
		for i, n := 0, 1+rng.Intn(4); i < n; i++ {
			name := fmt.Sprintf("c%d-%d", k, i)
			c := command(ns, name, append(append([]string{"/bin/dd"}, chaosCount...), "of=count-"+name)...)
			c.Spec.SessionRef = wbv1.ObjectName(sess)
			must(t, env.Client.Create(ctx, c))
			cmds = append(cmds, name)
			sl := command(ns, "sleep-"+name, "/bin/sleep", chaosSleep)
			sl.Spec.SessionRef, sl.Spec.ProfileRef = wbv1.ObjectName(sess), "sleep"
			must(t, env.Client.Create(ctx, sl))
			sleepers = append(sleepers, sl.Name)
			if rng.Intn(2) == 0 {
				ref := wbv1.ObjectName(name)
				w := &wbv1.Wait{ObjectMeta: metav1.ObjectMeta{Name: "w-" + name, Namespace: ns}, Spec: wbv1.WaitSpec{
					Scope: &wbv1.Scope{CommandRef: &ref}, Condition: wbv1.WaitCondition{Kind: wbv1.ConditionKindCommandDone}, DeadlineSeconds: 120}}
				must(t, env.Client.Create(ctx, w))
				waitNames = append(waitNames, w.Name)
			}
		}
		time.Sleep(time.Duration(rng.Intn(1500)) * time.Millisecond) // the random kill point (this is the chaos, not a wait for a condition)
		must(t, agentProc.Crash())
		agentProc = na.start(t)
	}

	outcomes := map[wbv1.CommandPhase]int{}
	for _, name := range cmds {
		var c wbv1.TerminalCommand
		chaosWait(t, agentProc, "command "+name+" to have its one outcome", func() (bool, string) {
			get(t, ns, name, &c)
			return wbv1.CommandIsFinal(c.Status.Conditions) && c.Status.Phase == wbv1.CommandPhaseFor(c.Status.Conditions), fmt.Sprintf("%+v", c.Status)
		})
		outcomes[c.Status.Phase]++
		b, err := os.ReadFile(filepath.Join(root, "count-"+name))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		runs := strings.Count(string(b), "ran\n")
		switch {
		case runs > 1:
			t.Errorf("command %s ran %d times", name, runs)
		case c.Status.Phase == wbv1.CommandSucceeded && runs != 1:
			t.Errorf("command %s Succeeded but its side effect happened %d times", name, runs)
		}
	}
	for _, name := range sleepers {
		var c wbv1.TerminalCommand
		chaosWait(t, agentProc, "command "+name+" to have its one outcome", func() (bool, string) {
			get(t, ns, name, &c)
			return wbv1.CommandIsFinal(c.Status.Conditions) && c.Status.Phase == wbv1.CommandPhaseFor(c.Status.Conditions), fmt.Sprintf("%+v", c.Status)
		})
		outcomes[c.Status.Phase]++
	}
	for _, name := range waitNames {
		var w wbv1.Wait
		eventually(t, 150*time.Second, "wait "+name+" to have its one outcome", func() (bool, string) {
			get(t, ns, name, &w)
			return wbv1.WaitIsFinal(w.Status.ConditionStatus), fmt.Sprintf("%+v", w.Status)
		})
	}
	t.Logf("chaos: %d counted commands, %d sleepers, %d waits, outcomes %v", len(cmds), len(sleepers), len(waitNames), outcomes)

	// Stop the agent cleanly and look at what it left.
	must(t, agentProc.Terminate())
	// Graceful stop kills and waits for every process the agent holds; the sleepers of
	// SIGKILLed agents were killed (and waited for) by the next agent's recovery sweep
	// before it served. None of this run's may be alive now.
	if left := findProcess("/bin/sleep", chaosSleep); len(left) != 0 {
		t.Errorf("orphan processes of this run alive after the agent's graceful stop: %v", left)
	}
	// Nothing may stay under <state>/tmp: a command's or session's temp root is a leak,
	// and so is the agent's own sandbox probe's scratch dir (procexec-check-*, while it
	// measures its action classes for the WorkbenchNode): a graceful stop waits for a
	// probe in flight (Agent.shutdown). CI once saw a stop land mid-probe before it did.
	// (The SIGKILLed agents' leftovers went in the next agent's recovery sweep.)
	if ents, _ := os.ReadDir(filepath.Join(state, "tmp")); len(ents) != 0 {
		var leaked []string
		for _, e := range ents {
			leaked = append(leaked, e.Name())
		}
		t.Errorf("leaked temp roots: %v", leaked)
	}
	db, err := store.Open(state)
	must(t, err)
	recs, err := db.Commands().List(0)
	must(t, err)
	must(t, db.Close())
	for _, r := range recs {
		var c wbv1.TerminalCommand
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Name}, &c); err != nil {
			t.Errorf("store record of %s/%s without an object: %v", r.Namespace, r.Name, err)
			continue
		}
		if string(c.UID) != r.UID || !wbv1.CommandPhaseIsFinal(wbv1.CommandPhase(r.Phase)) || wbv1.CommandPhase(r.Phase) != c.Status.Phase {
			t.Errorf("store and API server disagree on %s: store %s %s, status %s %s", r.Name, r.UID, r.Phase, c.UID, c.Status.Phase)
		}
	}
	// Restart once more so the suite's namespace cleanup is not left to a stopped node.
	agentProc = na.start(t)
}

// chaosWait is eventually (120 s) for the chaos run's final checks; on a timeout it asks the
// agent for a goroutine dump (SIGQUIT) and keeps its whole log in a file whose path the
// failure names, so a lost outcome shows where the agent stood.
func chaosWait(t *testing.T, p *agentProcess, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			_ = p.Signal(syscall.SIGQUIT)
			f, err := os.CreateTemp("", "chaos-agent-*.log")
			path := "(not kept: " + fmt.Sprint(err) + ")"
			if err == nil {
				_, _ = f.WriteString(p.Log.String())
				_ = f.Close()
				path = f.Name()
			}
			t.Fatalf("timed out after 120s waiting for %s; last saw: %s\nagent log with goroutine dump: %s\n%s", what, seen, path, p.LogTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
