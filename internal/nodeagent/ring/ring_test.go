package ring

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func mustNew(t *testing.T, cfg Config) *Ring {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return r
}

func TestDefaults(t *testing.T) {
	r := mustNew(t, Config{})
	cfg := r.Config()
	if cfg.MaxEvents != 1000 || cfg.MaxAge != 10*time.Minute || cfg.MaxBytes != 4<<20 {
		t.Fatalf("defaults = %+v, want 1000 events / 10m / 4MiB", cfg)
	}
	if _, err := New(Config{MaxEvents: CeilingMaxEvents + 1}); !(actuation.CodeOf(err) == actuation.CodeEventBufferFull) {
		t.Fatalf("above-ceiling config: got %v, want refusal %s", err, string(actuation.CodeEventBufferFull))
	}
}

func TestSeqStartsAtOneAndIncreases(t *testing.T) {
	r := mustNew(t, Config{})
	for i := 1; i <= 5; i++ {
		seq, err := r.Append(KindOutput, []byte{byte('a' + i)})
		if err != nil || seq != uint64(i) {
			t.Fatalf("append %d: seq=%d err=%v", i, seq, err)
		}
	}
	evs, next, gap := r.Read(0, 0)
	if gap != nil || len(evs) != 5 || next != 5 {
		t.Fatalf("read: %d events next=%d gap=%v", len(evs), next, gap)
	}
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
	evs, next, gap = r.Read(next, 0)
	if len(evs) != 0 || next != 5 || gap != nil {
		t.Fatalf("read at end: %d events next=%d gap=%v", len(evs), next, gap)
	}
}

func TestChunking(t *testing.T) {
	r := mustNew(t, Config{})
	data := bytes.Repeat([]byte("x"), MaxEventData*2+10)
	last, err := r.Append(KindOutput, data)
	if err != nil || last != 3 {
		t.Fatalf("append: last=%d err=%v", last, err)
	}
	evs, _, _ := r.Read(0, 0)
	if len(evs) != 3 || evs[0].Bytes != MaxEventData || evs[2].Bytes != 10 {
		t.Fatalf("chunks: %d events, sizes %d/%d", len(evs), evs[0].Bytes, evs[len(evs)-1].Bytes)
	}
	// The ring copies: mutating the caller's slice does not change events.
	data[0] = 'y'
	if evs[0].Data[0] != 'x' {
		t.Fatal("ring aliases the caller's buffer")
	}
}

func TestEvictByCountWithGap(t *testing.T) {
	r := mustNew(t, Config{MaxEvents: 3})
	for i := range 10 {
		if _, err := r.Append(KindOutput, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	st := r.Stats()
	if st.Events != 3 || st.FirstSeq != 8 || st.LastSeq != 10 || st.Evicted != 7 {
		t.Fatalf("stats after count eviction: %+v", st)
	}
	evs, next, gap := r.Read(2, 0)
	if gap == nil || gap.FromSeq != 3 || gap.ToSeq != 7 {
		t.Fatalf("gap = %+v, want {3 7}", gap)
	}
	if len(evs) != 3 || evs[0].Seq != 8 || next != 10 {
		t.Fatalf("events after gap: %d first=%d next=%d", len(evs), evs[0].Seq, next)
	}
	// Cursor 0 (from the beginning) also gets an explicit gap.
	_, _, gap = r.Read(0, 1)
	if gap == nil || gap.FromSeq != 1 || gap.ToSeq != 7 {
		t.Fatalf("gap from 0 = %+v, want {1 7}", gap)
	}
	// A cursor inside retention gets no gap.
	if _, _, gap = r.Read(8, 0); gap != nil {
		t.Fatalf("unexpected gap %+v for retained cursor", gap)
	}
}

func TestReadBatchBounded(t *testing.T) {
	r := mustNew(t, Config{})
	for range 20 {
		mustAppend(t, r, KindOutput, []byte("a"))
	}
	evs, next, _ := r.Read(0, 7)
	if len(evs) != 7 || next != 7 {
		t.Fatalf("batch: %d next=%d", len(evs), next)
	}
	evs, next, _ = r.Read(next, 100)
	if len(evs) != 13 || next != 20 {
		t.Fatalf("rest: %d next=%d", len(evs), next)
	}
}

func TestEvictByAge(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	r := mustNew(t, Config{MaxAge: time.Minute, Now: clk.Now})
	mustAppend(t, r, KindOutput, []byte("old1"))
	mustAppend(t, r, KindOutput, []byte("old2"))
	clk.Advance(45 * time.Second)
	mustAppend(t, r, KindOutput, []byte("mid"))
	clk.Advance(30 * time.Second) // old1/old2 now 75s old, mid 30s
	evs, next, gap := r.Read(0, 0)
	if gap == nil || gap.FromSeq != 1 || gap.ToSeq != 2 {
		t.Fatalf("age gap = %+v, want {1 2}", gap)
	}
	if len(evs) != 1 || string(evs[0].Data) != "mid" || next != 3 {
		t.Fatalf("after age eviction: %d events next=%d", len(evs), next)
	}
	clk.Advance(time.Minute)
	if st := r.Stats(); st.Events != 0 || st.Evicted != 3 || st.LastSeq != 3 {
		t.Fatalf("stats after full expiry: %+v", st)
	}
	// Seq keeps increasing after the ring emptied.
	if seq, _ := r.Append(KindStatus, []byte("running")); seq != 4 {
		t.Fatalf("seq after expiry = %d, want 4", seq)
	}
}

func TestEvictByBytes(t *testing.T) {
	r := mustNew(t, Config{MaxBytes: 10})
	mustAppend(t, r, KindOutput, []byte("aaaa")) // 1
	mustAppend(t, r, KindOutput, []byte("bbbb")) // 2
	mustAppend(t, r, KindOutput, []byte("cccc")) // 3 -> evicts 1 (12 > 10)
	st := r.Stats()
	if st.Bytes != 8 || st.FirstSeq != 2 || st.Evicted != 1 {
		t.Fatalf("stats after byte eviction: %+v", st)
	}
	// A payload larger than MaxBytes is chunked so that each chunk fits.
	last, err := r.Append(KindOutput, bytes.Repeat([]byte("z"), 25))
	if err != nil || last != 6 {
		t.Fatalf("oversize append: last=%d err=%v", last, err)
	}
	st = r.Stats()
	if st.Bytes != 5 || st.FirstSeq != 6 { // chunks 10+10+5: only the last fits beside nothing else
		t.Fatalf("byte cap violated: %+v", st)
	}
	// Metadata-only events cost no retained bytes.
	if _, err := r.AppendCount(KindInput, 1<<20); err != nil {
		t.Fatal(err)
	}
	if st2 := r.Stats(); st2.Bytes != st.Bytes {
		t.Fatalf("metadata-only event retained bytes: %d -> %d", st.Bytes, st2.Bytes)
	}
}

func TestOutputDigestCoversEvictedBytes(t *testing.T) {
	r := mustNew(t, Config{MaxEvents: 2})
	h := sha256.New()
	for i := range 10 {
		b := []byte(fmt.Sprintf("line %d\n", i))
		h.Write(b)
		mustAppend(t, r, KindOutput, b)
		mustAppend(t, r, KindInput, []byte("not digested"))
	}
	d, n := r.OutputDigest()
	if d != hex.EncodeToString(h.Sum(nil)) || n != 70 {
		t.Fatalf("digest mismatch: %s (%d bytes)", d, n)
	}
}

// The digest is folded lazily (at eviction, or when asked for): asked for at any point,
// between appends that evict by count, by bytes and by age, it is the digest of every
// output byte appended so far, in order.
func TestOutputDigestLazyMatchesEager(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	r := mustNew(t, Config{MaxEvents: 5, MaxBytes: 64, MaxAge: time.Minute, Now: func() time.Time { return now }})
	h := sha256.New()
	kinds := []Kind{KindOutput, KindInput, KindOutput, KindResize, KindOutput, KindOutput}
	for i := range 300 {
		kind := kinds[i%len(kinds)]
		b := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i%40)
		if kind == KindOutput {
			h.Write(b)
		}
		mustAppend(t, r, kind, b)
		if i%17 == 0 {
			now = now.Add(2 * time.Minute) // everything retained ages out at the next append
		}
		if i%7 == 0 || i%11 == 0 {
			d, _ := r.OutputDigest()
			if want := hex.EncodeToString(h.Sum(nil)); d != want {
				t.Fatalf("after append %d: digest %s, want %s", i, d, want)
			}
			if st := r.Stats(); st.OutputDigest != d {
				t.Fatalf("after append %d: Stats digest %s, OutputDigest %s", i, st.OutputDigest, d)
			}
		}
	}
	if d, _ := r.OutputDigest(); d != hex.EncodeToString(h.Sum(nil)) {
		t.Fatalf("final digest %s", d)
	}
}

// AppendOwned records the caller's bytes without a copy, split like Append's, each event
// capped at its own length (an event's Data cannot reach into its neighbour's bytes).
func TestAppendOwnedKeepsTheCallersBytes(t *testing.T) {
	r := mustNew(t, Config{MaxBytes: 3})
	data := []byte("abcdefgh")
	if _, err := r.AppendOwned(KindOutput, data); err != nil {
		t.Fatal(err)
	}
	evs, _, _ := r.Read(0, 0)
	if len(evs) != 1 || string(evs[0].Data) != "gh" || cap(evs[0].Data) != 2 || &evs[0].Data[0] != &data[6] {
		t.Fatalf("events %+v: want the last chunk \"gh\" aliasing the caller's bytes, capped", evs)
	}
	if st := r.Stats(); st.OutputBytes != 8 || st.Evicted != 2 {
		t.Fatalf("stats %+v", st)
	}
	d, _ := r.OutputDigest()
	if sum := sha256.Sum256(data); d != hex.EncodeToString(sum[:]) {
		t.Fatalf("digest %s", d)
	}
}

func TestWaitAndClose(t *testing.T) {
	r := mustNew(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := r.Wait(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on empty ring: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Wait(context.Background(), 0) }()
	mustAppend(t, r, KindOutput, []byte("x"))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not wake up on append within 5s")
	}
	notify := r.Notify()
	go func() { done <- r.Wait(context.Background(), 1) }()
	r.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("wait after close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not wake up on Close within 5s")
	}
	<-notify // closed by Close
	if _, err := r.Append(KindOutput, []byte("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	// Retained events stay readable and a wait for old seqs succeeds.
	if err := r.Wait(context.Background(), 0); err != nil {
		t.Fatalf("wait for retained seq after close: %v", err)
	}
	r.Close() // idempotent
}

// TestConcurrentWriterReaders runs one writer and several long-polling readers
// (run under -race). Every reader must observe a strictly increasing sequence
// in which each missing range is announced by a gap.
func TestConcurrentWriterReaders(t *testing.T) {
	r := mustNew(t, Config{MaxEvents: 64, MaxBytes: 4096})
	const total = 5000
	const readers = 4
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for id := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var cursor uint64
			for cursor < total {
				if err := r.Wait(ctx, cursor); err != nil && !errors.Is(err, ErrClosed) {
					errs <- fmt.Errorf("reader %d: %w", id, err)
					return
				}
				evs, next, gap := r.Read(cursor, 16+id)
				expect := cursor + 1
				if gap != nil {
					if gap.FromSeq != expect || gap.ToSeq < gap.FromSeq {
						errs <- fmt.Errorf("reader %d: bad gap %+v at cursor %d", id, gap, cursor)
						return
					}
					expect = gap.ToSeq + 1
				}
				for _, e := range evs {
					if e.Seq != expect {
						errs <- fmt.Errorf("reader %d: seq %d, want %d", id, e.Seq, expect)
						return
					}
					expect++
				}
				if next < cursor {
					errs <- fmt.Errorf("reader %d: cursor went backwards %d -> %d", id, cursor, next)
					return
				}
				cursor = next
			}
		}()
	}
	for i := range total {
		if _, err := r.Append(KindOutput, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func BenchmarkAppendRead(b *testing.B) {
	r, _ := New(Config{})
	data := bytes.Repeat([]byte("x"), 512)
	b.SetBytes(int64(len(data)))
	var cursor uint64
	for b.Loop() {
		if _, err := r.Append(KindOutput, data); err != nil {
			b.Fatal(err)
		}
		_, cursor, _ = r.Read(cursor, 1)
	}
}

// TestGrowOnDemandKeepsOrder: a ring starts small and grows up to MaxEvents; growing a
// wrapped buffer (the head moved by age eviction) keeps every event in order.
func TestGrowOnDemandKeepsOrder(t *testing.T) {
	now := time.Unix(1000, 0)
	r, err := New(Config{MaxEvents: 100, MaxAge: 10 * time.Second, MaxBytes: 1 << 20, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.buf) != initialEvents {
		t.Fatalf("a new ring holds %d slots, want %d", len(r.buf), initialEvents)
	}
	for i := 0; i < 8; i++ {
		if _, err := r.Append(KindOutput, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(6 * time.Second)
	for i := 8; i < 16; i++ {
		if _, err := r.Append(KindOutput, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(5 * time.Second) // the first 8 are older than MaxAge now
	for i := 16; i < 30; i++ {     // wraps the 16 slots, then grows
		if _, err := r.Append(KindOutput, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if len(r.buf) != 32 {
		t.Fatalf("grew to %d slots, want 32", len(r.buf))
	}
	evs, _, gap := r.Read(0, 0)
	if gap == nil {
		t.Fatal("no gap reported for the 8 evicted events")
	}
	if len(evs) != 22 {
		t.Fatalf("read %d events, want 22", len(evs))
	}
	for i, e := range evs {
		if want := byte(8 + i); e.Data[0] != want || e.Seq != uint64(9+i) {
			t.Fatalf("event %d = seq %d data %d, want seq %d data %d", i, e.Seq, e.Data[0], 9+i, want)
		}
	}
	for i := 30; i < 300; i++ {
		if _, err := r.Append(KindOutput, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if len(r.buf) != 100 || r.n != 100 {
		t.Fatalf("ring holds %d of %d slots, want 100 of 100 (the MaxEvents cap)", r.n, len(r.buf))
	}
}

func mustAppend(t *testing.T, r *Ring, kind Kind, data []byte) {
	t.Helper()
	if _, err := r.Append(kind, data); err != nil {
		t.Fatal(err)
	}
}

// WaitNonInput returns for output, exit and the ring's end, never for input alone: an
// attach stream is not woken by the keystrokes it forwards.
func TestWaitNonInputIgnoresInput(t *testing.T) {
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Append(KindOutput, []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.AppendCount(KindInput, 3); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.WaitNonInput(done, out); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitNonInput after an input event only: %v, want it still waiting (canceled)", err)
	}
	if err := r.Wait(done, out); err != nil {
		t.Fatalf("Wait sees the input event: %v", err)
	}
	// A waiter parked behind the input is released by the next output.
	last := r.LastSeq()
	woke := make(chan error, 1)
	go func() { woke <- r.WaitNonInput(context.Background(), last) }()
	if _, err := r.AppendCount(KindInput, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Append(KindOutput, []byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := <-woke; err != nil {
		t.Fatalf("WaitNonInput after output: %v", err)
	}
	// The end releases it too, once nothing newer is there.
	last = r.LastSeq()
	if _, err := r.AppendCount(KindInput, 1); err != nil {
		t.Fatal(err)
	}
	go func() { woke <- r.WaitNonInput(context.Background(), last) }()
	r.Close()
	if err := <-woke; !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitNonInput on a closed ring: %v, want ErrClosed", err)
	}
}
