// Package ring implements the bounded per-session event ring of the node agent.
//
// Events carry strictly increasing sequence numbers starting at 1. The ring is
// bounded by event count, event age and retained bytes; the oldest events are
// evicted first. A reader whose cursor has fallen out of retention receives an
// explicit Gap marker instead of silently skipping events. Readers long-poll
// without sleeping: Wait blocks on a broadcast channel that is closed (and
// replaced) under the ring's mutex whenever an event is appended.
//
// The ring also keeps a running SHA-256 digest of every output byte ever
// appended (including evicted ones), so status surfaces can publish digests
// without publishing bytes. The digest is folded lazily, off the append path
// (a PTY's output pump): an output event is hashed when it is evicted or when a
// digest is asked for, whichever comes first, always in sequence order.
package ring

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"sync"
	"time"

	"sensorium.dev/workbench/internal/actuation"
)

// Kind classifies an event.
type Kind string

// Event kinds.
const (
	KindOutput Kind = "output" // bytes produced by the program (Data holds them)
	KindInput  Kind = "input"  // bytes written to the program (metadata only: Bytes, no Data)
	KindResize Kind = "resize" // terminal resized (Data: "ROWSxCOLS")
	KindSignal Kind = "signal" // signal delivered (Data: signal name)
	KindExit   Kind = "exit"   // program exit (Data: "exit=N" or "signal=NAME")
	KindGap    Kind = "gap"    // producer-side loss marker (Data describes it)
	KindStatus Kind = "status" // lifecycle status change (Data: phase name)
)

// Defaults and ceilings. Every bound is explicit.
const (
	// DefaultMaxEvents is the default retained event count (resolved
	// decision 11: 1,000 events).
	DefaultMaxEvents = 1000
	// DefaultMaxAge is the default retention window (10 minutes).
	DefaultMaxAge = 10 * time.Minute
	// DefaultMaxBytes is the default cap on retained Data bytes (4 MiB).
	DefaultMaxBytes = 4 << 20
	// MaxEventData is the largest Data payload of one event; Append splits
	// larger payloads into several events (4 KiB chunks).
	MaxEventData = 4 << 10
	// DefaultReadBatch is the batch size used by Read when max <= 0.
	DefaultReadBatch = 256
	// MaxReadBatch caps the number of events one Read returns.
	MaxReadBatch = 4096

	// CeilingMaxEvents, CeilingMaxAge and CeilingMaxBytes bound a Config;
	// New refuses larger values with refusal.EventBufferFull.
	CeilingMaxEvents = 100_000
	CeilingMaxAge    = 24 * time.Hour
	CeilingMaxBytes  = 64 << 20
)

// ErrClosed is returned by Wait once the ring is closed and holds no event
// after the requested sequence number.
var ErrClosed = errors.New("ring: closed")

// Event is one immutable ring entry. Data must not be modified by readers.
type Event struct {
	Seq   uint64
	Time  time.Time
	Kind  Kind
	Data  []byte
	Bytes int // payload size in bytes (for metadata-only events Data is nil)
}

// Gap reports that events FromSeq..ToSeq (inclusive) were evicted before the
// reader could see them.
type Gap struct {
	FromSeq uint64
	ToSeq   uint64
}

// Config bounds a ring. Zero values select the defaults.
type Config struct {
	MaxEvents int
	MaxAge    time.Duration
	MaxBytes  int
	// Now is the clock used for event times and age eviction (tests inject
	// a fake clock). Defaults to time.Now.
	Now func() time.Time
}

// Stats is a metadata-only view of the ring.
type Stats struct {
	FirstSeq     uint64 // oldest retained seq (0 when empty)
	LastSeq      uint64 // newest seq ever appended (0 when none)
	Events       int    // retained events
	Bytes        int    // retained Data bytes
	Evicted      uint64 // events evicted so far
	OutputBytes  uint64 // output bytes ever appended
	OutputDigest string // hex sha256 of all output bytes ever appended
	Closed       bool
}

// Ring is a bounded, concurrency-safe event ring.
type Ring struct {
	cfg Config

	mu      sync.Mutex
	buf     []Event // circular storage, len == cfg.MaxEvents
	head    int     // index of the oldest retained event
	n       int     // retained events
	bytes   int     // retained Data bytes
	nextSeq uint64  // seq of the next appended event
	evicted uint64
	closed  bool

	notify      chan struct{} // closed on the next append/close
	notifyTaken bool          // somebody holds notify: replace it on append
	// The same for events other than input (WaitNonInput): an attach stream, which sends
	// output and the exit only, is not woken by each keystroke it forwards itself.
	lastNonInput   uint64 // seq of the newest event whose kind is not KindInput
	nonInputNotify chan struct{}
	nonInputTaken  bool

	digest      hash.Hash
	digested    uint64 // every output event with Seq <= digested is folded into digest
	outputBytes uint64
}

// New creates a ring. Values above the ceilings are refused with
// refusal.EventBufferFull; negative values are invalid.
func New(cfg Config) (*Ring, error) {
	if cfg.MaxEvents < 0 || cfg.MaxAge < 0 || cfg.MaxBytes < 0 {
		return nil, actuation.Refusef(actuation.CodeInvalidSpec, "ring bounds must not be negative")
	}
	if cfg.MaxEvents == 0 {
		cfg.MaxEvents = DefaultMaxEvents
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxEvents > CeilingMaxEvents || cfg.MaxAge > CeilingMaxAge || cfg.MaxBytes > CeilingMaxBytes {
		return nil, actuation.Refusef(actuation.CodeEventBufferFull,
			"ring bounds %d events/%s/%d bytes exceed ceilings %d/%s/%d",
			cfg.MaxEvents, cfg.MaxAge, cfg.MaxBytes, CeilingMaxEvents, CeilingMaxAge, CeilingMaxBytes)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Ring{
		cfg:     cfg,
		buf:     make([]Event, min(cfg.MaxEvents, initialEvents)),
		nextSeq: 1,
		notify:  make(chan struct{}),
		digest:  sha256.New(),

		nonInputNotify: make(chan struct{}),
	}, nil
}

// Config returns the effective configuration.
func (r *Ring) Config() Config { return r.cfg }

// Append records data as one or more events of the given kind (split into
// chunks of at most MaxEventData bytes, or MaxBytes if smaller) and returns the seq of the last event written. An empty
// payload records a single event with no Data. Appending to a closed ring
// returns ErrClosed.
func (r *Ring) Append(kind Kind, data []byte) (uint64, error) {
	return r.appendData(kind, data, true)
}

// AppendOwned is Append for a payload the ring takes over instead of copying: the caller
// never modifies data afterwards (a PTY's output pump reads each chunk into a fresh part
// of a larger buffer, so recording output costs no allocation or copy per chunk). Events
// hold sub-slices of data.
func (r *Ring) AppendOwned(kind Kind, data []byte) (uint64, error) {
	return r.appendData(kind, data, false)
}

func (r *Ring) appendData(kind Kind, data []byte, copyData bool) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, ErrClosed
	}
	now := r.cfg.Now()
	if kind == KindOutput && len(data) > 0 {
		r.outputBytes += uint64(len(data))
	}
	if len(data) == 0 {
		r.appendLocked(now, kind, nil, 0)
	}
	chunkMax := min(MaxEventData, r.cfg.MaxBytes) // a chunk always fits an empty ring
	for len(data) > 0 {
		n := min(len(data), chunkMax)
		chunk := data[:n:n]
		if copyData {
			chunk = make([]byte, n)
			copy(chunk, data[:n])
		}
		r.appendLocked(now, kind, chunk, n)
		data = data[n:]
	}
	r.wakeLocked()
	return r.nextSeq - 1, nil
}

// AppendCount records a metadata-only event: Bytes is n and Data is nil (used
// for input, whose bytes are never retained).
func (r *Ring) AppendCount(kind Kind, n int) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, ErrClosed
	}
	r.appendLocked(r.cfg.Now(), kind, nil, n)
	r.wakeLocked()
	return r.nextSeq - 1, nil
}

func (r *Ring) appendLocked(now time.Time, kind Kind, data []byte, n int) {
	r.pruneAgeLocked(now)
	for r.n > 0 && (r.n >= r.cfg.MaxEvents || r.bytes+len(data) > r.cfg.MaxBytes) {
		r.evictOldestLocked()
	}
	if r.n == len(r.buf) {
		r.growLocked()
	}
	idx := (r.head + r.n) % len(r.buf)
	r.buf[idx] = Event{Seq: r.nextSeq, Time: now, Kind: kind, Data: data, Bytes: n}
	if kind != KindInput {
		r.lastNonInput = r.nextSeq
	}
	r.nextSeq++
	r.n++
	r.bytes += len(data)
}

// initialEvents is the slot count a ring starts with; it doubles on demand up to
// MaxEvents, so an idle session's ring costs little.
const initialEvents = 16

// growLocked doubles the slots (at most MaxEvents), keeping the events in order.
func (r *Ring) growLocked() {
	nb := make([]Event, min(max(2*len(r.buf), 1), r.cfg.MaxEvents))
	for i := 0; i < r.n; i++ {
		nb[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = nb, 0
}

func (r *Ring) evictOldestLocked() {
	if e := &r.buf[r.head]; e.Seq > r.digested {
		// Everything older is gone and was folded: the oldest is the next to fold.
		if e.Kind == KindOutput {
			r.digest.Write(e.Data)
		}
		r.digested = e.Seq
	}
	r.bytes -= len(r.buf[r.head].Data)
	r.buf[r.head] = Event{}
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	r.evicted++
}

func (r *Ring) pruneAgeLocked(now time.Time) {
	cutoff := now.Add(-r.cfg.MaxAge)
	for r.n > 0 && r.buf[r.head].Time.Before(cutoff) {
		r.evictOldestLocked()
	}
}

func (r *Ring) wakeLocked() {
	if r.notifyTaken {
		close(r.notify)
		r.notify = make(chan struct{})
		r.notifyTaken = false
	}
	if r.nonInputTaken && r.lastNonInput == r.nextSeq-1 {
		close(r.nonInputNotify)
		r.nonInputNotify = make(chan struct{})
		r.nonInputTaken = false
	}
}

// digestLocked folds the retained output not yet folded and returns the hex digest.
func (r *Ring) digestLocked() string {
	start := 0
	if first := r.firstSeqLocked(); r.digested >= first {
		start = int(r.digested - first + 1) // retained events are in Seq order, without holes
	}
	for i := start; i < r.n; i++ {
		e := &r.buf[(r.head+i)%len(r.buf)]
		if e.Kind == KindOutput {
			r.digest.Write(e.Data)
		}
		r.digested = e.Seq
	}
	return hex.EncodeToString(r.digest.Sum(nil))
}

// firstSeqLocked is the oldest retained seq, or nextSeq when empty.
func (r *Ring) firstSeqLocked() uint64 {
	if r.n == 0 {
		return r.nextSeq
	}
	return r.buf[r.head].Seq
}

// Read returns up to max events with Seq > cursor (cursor 0 means "from the
// beginning"). If events after cursor were evicted, gap reports the missing
// range and the returned events start after it. next is the cursor to pass to
// the following Read: the seq of the last returned event, or the end of the
// gap, or cursor itself when nothing new exists.
func (r *Ring) Read(cursor uint64, max int) (events []Event, next uint64, gap *Gap) {
	if max <= 0 {
		max = DefaultReadBatch
	}
	max = min(max, MaxReadBatch)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pruneAgeLocked(r.cfg.Now())
	next = cursor
	first := r.firstSeqLocked()
	start := cursor + 1
	if start < first {
		gap = &Gap{FromSeq: start, ToSeq: first - 1}
		start = first
		next = first - 1
	}
	if r.n == 0 || start >= r.nextSeq {
		return nil, next, gap
	}
	off := int(start - first)
	count := min(r.n-off, max)
	events = make([]Event, count)
	for i := range count {
		events[i] = r.buf[(r.head+off+i)%len(r.buf)]
	}
	return events, events[count-1].Seq, gap
}

// LastSeq returns the seq of the newest event ever appended (0 if none).
func (r *Ring) LastSeq() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nextSeq - 1
}

// Notify returns a channel that is closed when the next event is appended or
// the ring is closed. Callers re-check state after it fires.
func (r *Ring) Notify() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c := make(chan struct{})
		close(c)
		return c
	}
	r.notifyTaken = true
	return r.notify
}

// Wait blocks until an event with Seq > afterSeq exists, the ring is closed
// (ErrClosed, only when nothing newer exists) or ctx is done (ctx.Err()). It
// never sleeps: it parks on the broadcast channel.
func (r *Ring) Wait(ctx context.Context, afterSeq uint64) error { return r.wait(ctx, afterSeq, false) }

// WaitNonInput is Wait for an event other than input (KindInput): it blocks until one
// with Seq > afterSeq exists, the ring is closed (ErrClosed, only when no such event is
// newer) or ctx is done. Input events appended meanwhile do not wake it.
func (r *Ring) WaitNonInput(ctx context.Context, afterSeq uint64) error {
	return r.wait(ctx, afterSeq, true)
}

// wait parks on the broadcast channel of every event (nonInput false) or of events other
// than input (nonInput true) until one newer than afterSeq exists, the ring is closed or
// ctx is done.
func (r *Ring) wait(ctx context.Context, afterSeq uint64, nonInput bool) error {
	for {
		r.mu.Lock()
		last, taken, ch := r.nextSeq-1, &r.notifyTaken, r.notify
		if nonInput {
			last, taken, ch = r.lastNonInput, &r.nonInputTaken, r.nonInputNotify
		}
		if last > afterSeq {
			r.mu.Unlock()
			return nil
		}
		if r.closed {
			r.mu.Unlock()
			return ErrClosed
		}
		*taken = true
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("ring wait after seq %d: %w", afterSeq, ctx.Err())
		}
	}
}

// Close stops further appends and wakes every waiter. Retained events stay
// readable. Close is idempotent.
func (r *Ring) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	close(r.notify)
	r.notifyTaken = false
	close(r.nonInputNotify)
	r.nonInputTaken = false
}

// Stats returns a metadata-only snapshot (after age pruning).
func (r *Ring) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.pruneAgeLocked(r.cfg.Now())
	}
	st := Stats{
		LastSeq:      r.nextSeq - 1,
		Events:       r.n,
		Bytes:        r.bytes,
		Evicted:      r.evicted,
		OutputBytes:  r.outputBytes,
		OutputDigest: r.digestLocked(),
		Closed:       r.closed,
	}
	if r.n > 0 {
		st.FirstSeq = r.buf[r.head].Seq
	}
	return st
}

// OutputDigest returns the hex sha256 of every output byte appended so far and
// their count.
func (r *Ring) OutputDigest() (string, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.digestLocked(), r.outputBytes
}
