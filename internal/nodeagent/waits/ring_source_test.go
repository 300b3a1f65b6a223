package waits

import (
	"regexp"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/nodeagent/ring"
)

// TestRingSourceObserves: a structured session's ring source answers output.since and
// output.matches from the ring's output events, supports no process kinds, and ends a
// wait Final once the session is closed without the condition.
func TestRingSourceObserves(t *testing.T) {
	rg, err := ring.New(ring.Config{MaxEvents: 64})
	if err != nil {
		t.Fatal(err)
	}
	ended := false
	src := RingSource(rg, time.Now(), func() bool { return ended })
	ks, ok := src.(KindSupporter)
	if !ok || !ks.Supports(KindOutputSince) || !ks.Supports(KindOutputMatches) || !ks.Supports(KindQuiescent) || ks.Supports(KindProcessAlive) {
		t.Fatalf("ring source kinds: supporter %v", ok)
	}
	since := &Request{Kind: KindOutputSince}
	if obs, err := src.Observe(since); err != nil || obs.Satisfied || obs.Final {
		t.Fatalf("empty ring: %+v, %v; want not satisfied, not final", obs, err)
	}
	seq, err := rg.Append(ring.KindOutput, []byte("\x1b[32mbuild ok\x1b[0m\n"))
	if err != nil {
		t.Fatal(err)
	}
	if obs, err := src.Observe(since); err != nil || !obs.Satisfied || obs.SeqFrom != seq || obs.SeqTo != seq {
		t.Fatalf("output.since after one event: %+v, %v; want satisfied at seq %d", obs, err, seq)
	}
	match := &Request{Kind: KindOutputMatches, Pattern: regexp.MustCompile(`build ok`)}
	if obs, err := src.Observe(match); err != nil || !obs.Satisfied {
		t.Fatalf("output.matches through escapes: %+v, %v", obs, err)
	}
	miss := &Request{Kind: KindOutputMatches, Pattern: regexp.MustCompile(`never`), SinceSeq: 0}
	if obs, _ := src.Observe(miss); obs.Satisfied || obs.Final {
		t.Fatalf("no match while open: %+v; want pending", obs)
	}
	ended = true
	if obs, _ := src.Observe(miss); obs.Satisfied || !obs.Final {
		t.Fatalf("no match after the session closed: %+v; want final", obs)
	}
	if src.Changed() != nil {
		t.Fatal("a closed session's source still offers a change channel")
	}
}
