package dataplane

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// TestKubeStreamSharesKeepOperatorsServed: one agent opens event followed streams through the
// real authenticator and authorizer until it is refused with share-cap-reached (its
// per-identity share); a second agent then takes the rest of what agents and observers may
// hold and is refused with share-cap-reached too; an operator still parks its followed streams
// in the reserve (only the full cap refuses it, queue-full) and still reads. Before the
// fix the agent took every slot and the operator was refused with queue-full.
func TestKubeStreamSharesKeepOperatorsServed(t *testing.T) {
	fx := requireAPIServer(t)
	parked, onPark := parkSignal()
	ts := startKubeServer(t, Limits{MaxLongPolls: 6, StreamOperatorReserve: 2, StreamPerIdentity: 3}, CacheOptions{}, onPark)
	s := ts.openSession(t, testNS, "shares", wbv1.RawInputOperatorOnly, 0)
	cursor := s.Events().LastSeq()
	path := fmt.Sprintf("%s?since=%d&follow=true", sessionPath(testNS, "shares", "events"), cursor)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	type answer struct {
		status int
		body   []byte
	}
	// open starts a followed stream as who: status 0 once it parks (it holds a slot until the
	// test ends), else the refusal.
	open := func(who string) answer {
		t.Helper()
		res := make(chan answer, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, b, _ := ts.request(ctx, "GET", path, fx.tokens[who], nil)
			res <- answer{st, b}
		}()
		select {
		case <-parked:
			return answer{}
		case a := <-res:
			return a
		case <-time.After(20 * time.Second):
			t.Fatalf("%s's followed stream neither parked nor was refused", who)
		}
		return answer{}
	}
	wantRefused := func(who string, a answer, code string) {
		t.Helper()
		if a.status != 429 || errorCode(t, a.body) != code {
			t.Fatalf("%s: got %d %s, want 429 %s", who, a.status, a.body, code)
		}
		t.Logf("%s refused: %s", who, a.body)
	}
	// The agent opens streams until refused: it holds its share (3), never every slot.
	n := 0
	for ; n < 6; n++ {
		if a := open("agent"); a.status != 0 {
			wantRefused("agent", a, string(actuation.CodeShareCapReached))
			break
		}
	}
	if n != 3 {
		t.Fatalf("the agent held %d streams, want its share of 3", n)
	}
	// A second agent takes the last slot open to agents and observers, then is refused.
	if a := open("agent2"); a.status != 0 {
		t.Fatalf("agent2 refused with %d %s while a slot open to it was free", a.status, a.body)
	}
	wantRefused("agent2", open("agent2"), string(actuation.CodeShareCapReached))
	// The operator is served from its reserve, and still reads.
	for i := 0; i < 2; i++ {
		if a := open("operator"); a.status != 0 {
			t.Fatalf("operator refused with %d %s while its reserve was free", a.status, a.body)
		}
	}
	ts.events(t, fx.tokens["operator"], testNS, "shares", cursor)
	// Only the full cap refuses the operator.
	wantRefused("operator", open("operator"), string(actuation.CodeQueueFull))
}
