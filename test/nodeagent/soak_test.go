package nodeagent

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// soakInFlight is at most the suite agent's caps.concurrentCommands: its default,
// clamp(2 × CPUs, 8, 64), is never below 8 (docs/capacity.md).
const soakInFlight = 8

// TestSoakFootprintFlat runs rounds of commands on one session, deletes them, and checks
// that after each round the agent holds nothing more than before it: no finished command
// in memory, no record of a deleted command in the store, and heap and store size flat
// (the figures are logged for docs/benchmarks.md). CI-sized: 4 rounds of 25 commands;
// WB_SOAK_ROUNDS sets the rounds (`make load` runs 20).
func TestSoakFootprintFlat(t *testing.T) {
	rounds, perRound := envInt("WB_SOAK_ROUNDS", 4), 25
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, workDir(t))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/echo", nil, []string{"soak-"})))
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	// The suite's agent also holds the records of other tests' commands (their objects
	// still exist): the soak's own work must leave the counts where they were.
	base, err := ag.Footprint()
	must(t, err)
	var firstHeap uint64
	var firstStore int64
	for r := 0; r < rounds; r++ {
		var cmds []*wbv1.TerminalCommand
		for i := 0; i < perRound; i++ {
			c := command(ns, fmt.Sprintf("c%d-%d", r, i), "/bin/echo", fmt.Sprintf("soak-%d-%d", r, i))
			must(t, env.Client.Create(ctx, c))
			cmds = append(cmds, c)
			if len(cmds)%soakInFlight == 0 || i == perRound-1 {
				// At most the node's concurrent-command cap in flight: a soak measures the
				// footprint of the same work, not overload (above the cap a command is
				// refused command-cap-reached by design: TestLoad).
				for _, c := range cmds[(len(cmds)-1)/soakInFlight*soakInFlight:] {
					if got := waitFinal(t, ns, c.Name); got.Status.Phase != wbv1.CommandSucceeded {
						t.Fatalf("command %s: %+v, refusal %+v", c.Name, got.Status, got.Status.Refusal)
					}
				}
			}
		}
		for _, c := range cmds {
			must(t, env.Client.Delete(ctx, c))
		}
		for _, c := range cmds {
			eventually(t, 30*time.Second, "command "+c.Name+" to go", gone(ctx, c))
		}
		eventually(t, 30*time.Second, "the agent to drop every finished and deleted command", func() (bool, string) {
			f, err := ag.Footprint()
			must(t, err)
			return f.LiveCommands <= base.LiveCommands && f.CommandRecords <= base.CommandRecords, fmt.Sprintf("%+v (before: %+v)", f, base)
		})
		f, err := ag.Footprint()
		must(t, err)
		h := heap()
		t.Logf("round %d: %d commands; after: heap in use %d KiB, store %d KiB, %+v", r+1, perRound, h>>10, f.StoreBytes>>10, f)
		if r == 0 {
			firstHeap, firstStore = h, f.StoreBytes
			continue
		}
		if f.StoreBytes > 2*firstStore {
			t.Fatalf("store grew from %d to %d bytes over %d rounds of the same work", firstStore, f.StoreBytes, r)
		}
		if h > 2*firstHeap {
			t.Fatalf("heap in use grew from %d to %d bytes over %d rounds of the same work", firstHeap, h, r)
		}
	}
	var left wbv1.TerminalCommandList
	must(t, env.Client.List(ctx, &left, client.InNamespace(ns)))
	if len(left.Items) != 0 {
		t.Fatalf("%d commands left", len(left.Items))
	}
}
