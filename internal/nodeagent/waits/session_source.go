package waits

import (
	"strings"
	"time"
	"unicode/utf8"

	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/nodeagent/session"
)

// Session scan bounds: one evaluation reads at most ScanEvents events (the
// newest, when more arrived since the previous evaluation) and matches at
// most ScanBytes of their output (the newest), plus the bounded screen
// viewport. matchTailBytes of raw output are carried between evaluations so a
// match may span two evaluations.
const (
	ScanEvents     = 256
	ScanBytes      = 64 << 10
	matchTailBytes = 4 << 10
	// DefaultDiagnosticQuiet is the quiet window used for diagnostics when
	// the request sets none.
	DefaultDiagnosticQuiet = 2 * time.Second
	// sinceBatches bounds the backlog scan of output.since per evaluation;
	// a larger backlog is resumed after backlogRecheck.
	sinceBatches   = 16
	backlogRecheck = 10 * time.Millisecond
	// HungFactor: maybe-hung once there has been no output for
	// HungFactor x the quiet window while the process is alive.
	HungFactor = 3
)

// PromptSuffixes are the line endings (before the cursor, ignoring at most
// one trailing blank) that make a quiet, alive session "waiting-for-input".
// A heuristic: it reports, it never acts.
var PromptSuffixes = []string{"$", "#", ">", ":", "?", "%"}

// termScan is the per-wait state of a session source (kept in the Request).
type termScan struct {
	started     bool
	cursor      uint64    // last event seq folded in
	firstSeq    uint64    // first seq of the first window (observed range start)
	lastOut     time.Time // newest output time (an upper bound until output is seen)
	lastOutSeq  uint64
	lastResize  time.Time
	sinceAt     time.Time // time of the SinceSeq event, when still retained
	firstSince  uint64    // first output seq > SinceSeq
	sinceCursor uint64    // older events scanned for output.since
	lastSince   uint64    // newest output seq > SinceSeq
	tail        []byte    // raw output tail for matches
	skipped     bool      // events were skipped (window) or evicted (gap)
	screen      string    // screen digest at the last sample
	screenAt    time.Time
	screenMoved time.Time // an unexplained screen change (resize, redraw)
}

type sessionSource struct{ s *session.Session }

// SessionSource observes a PTY session: output since/matches through the
// event ring (bounded scan window) plus the screen for matches; quiescent,
// process alive, no-progress; and the diagnostics quiescent,
// waiting-for-input, no-progress and maybe-hung. It never writes to, signals
// or kills the session. One source may serve many waits (their scan state is
// per wait).
func SessionSource(s *session.Session) Source {
	if s == nil {
		return nil
	}
	return &sessionSource{s: s}
}

func (x *sessionSource) Supports(kind string) bool {
	switch kind {
	case KindOutputSince, KindOutputMatches, KindQuiescent, KindProcessAlive, KindNoProgress:
		return true
	}
	return false
}

func (x *sessionSource) done() bool {
	select {
	case <-x.s.Done():
		return true
	default:
		return false
	}
}

// Changed fires on the next ring event (output, input, resize, signal, phase
// change, exit); nil once the session ended (its ring is closed).
func (x *sessionSource) Changed() <-chan struct{} {
	if x.done() {
		return nil
	}
	return x.s.Events().Notify()
}

func (x *sessionSource) Observe(req *Request) (Observation, error) {
	done := x.done() // before reading: once done, the ring holds everything
	now := time.Now()
	sc := req.term
	if sc == nil {
		sc = &termScan{}
		req.term = sc
	}
	r := x.s.Events()
	last := r.LastSeq()
	from := sc.cursor
	if last > ScanEvents && from < last-ScanEvents {
		if sc.started {
			sc.skipped = true
		}
		from = last - ScanEvents
		sc.tail = nil
	}
	evs, next, gap := r.Read(from, ScanEvents)
	if gap != nil {
		if sc.started {
			sc.skipped = true
		}
		sc.tail = nil
	}
	first := !sc.started
	if first {
		sc.firstSeq = from + 1
		if gap != nil {
			sc.firstSeq = gap.ToSeq + 1
		}
		if req.SinceSeq > 0 {
			if e, _, _ := r.Read(req.SinceSeq-1, 1); len(e) == 1 && e[0].Seq == req.SinceSeq {
				sc.sinceAt = e[0].Time
			}
		}
	}

	matching := req.Kind == KindOutputMatches
	var chunks [][]byte
	sawOut := false
	for _, ev := range evs {
		switch ev.Kind {
		case ring.KindOutput:
			sc.lastOut, sc.lastOutSeq, sawOut = ev.Time, ev.Seq, true
			if ev.Seq > req.SinceSeq {
				if sc.firstSince == 0 {
					sc.firstSince = ev.Seq
				}
				sc.lastSince = ev.Seq
				if matching {
					chunks = append(chunks, ev.Data)
				}
			}
		case ring.KindResize:
			sc.lastResize = ev.Time
		}
	}
	if first && !sawOut {
		// No output in the first window: any earlier output is older than
		// the window's first event; with no earlier event, quiet since start.
		switch {
		case len(evs) > 0 && (from > 0 || gap != nil):
			sc.lastOut = evs[0].Time
		case len(evs) == 0 && last > 0:
			sc.lastOut = now.Add(-r.Config().MaxAge) // all evicted by age
		default:
			sc.lastOut = x.s.Info().Started
			if sc.lastOut.IsZero() {
				sc.lastOut = now
			}
		}
	}
	if len(evs) > 0 {
		sc.cursor = next
	}
	sc.started = true
	sinceBacklog := false
	if req.Kind == KindOutputSince && sc.firstSince == 0 {
		// The newest window had no output after SinceSeq; any output event
		// after it counts, so scan the older retained events too (bounded).
		sinceBacklog = x.scanSince(r, req.SinceSeq, from, sc)
		if !sinceBacklog && sc.firstSince == 0 {
			sc.sinceCursor = max(sc.sinceCursor, sc.cursor) // the window is scanned too
		}
	}

	phase := x.s.Phase()
	alive := phase == session.PhaseRunning || phase == session.PhaseIdle
	quietFrom := sc.lastOut
	if sc.sinceAt.After(quietFrom) {
		quietFrom = sc.sinceAt
	}
	quietFor := now.Sub(quietFrom)
	q := req.Quiet
	if q <= 0 {
		q = DefaultDiagnosticQuiet
	}

	obs := Observation{ObservedAt: now, SeqFrom: sc.firstSeq, SeqTo: sc.cursor}
	if req.SinceSeq > 0 {
		obs.SeqFrom = req.SinceSeq + 1
	}
	if sc.skipped {
		obs.Detail = "some events were skipped (scan window) or evicted; "
	}

	var snap *session.Snapshot
	if matching || quietFor >= q {
		s := x.s.Screen()
		snap = &s
		obs.Digest = "sha256:" + s.Digest
		if sc.screen != "" && s.Digest != sc.screen && !sc.lastOut.After(sc.screenAt) {
			sc.screenMoved = now // changed without output: resize or redraw
		}
		sc.screen, sc.screenAt = s.Digest, now
	}
	progressAt := quietFrom
	for _, t := range []time.Time{sc.lastResize, sc.screenMoved} {
		if t.After(progressAt) {
			progressAt = t
		}
	}
	stalledFor := now.Sub(progressAt)

	// Diagnostics: only for a live process; silence of an ended session
	// says nothing.
	var recheck []time.Duration
	if alive {
		if quietFor >= q {
			obs.Diagnostics = append(obs.Diagnostics, DiagQuiescent)
			if snap != nil && promptLike(snap) {
				obs.Diagnostics = append(obs.Diagnostics, DiagWaitingForInput)
			}
		} else {
			recheck = append(recheck, q-quietFor)
		}
		if stalledFor >= q { // stalledFor <= quietFor: no output either
			obs.Diagnostics = append(obs.Diagnostics, DiagNoProgress)
		} else {
			recheck = append(recheck, q-stalledFor)
		}
		if quietFor >= HungFactor*q {
			obs.Diagnostics = append(obs.Diagnostics, DiagMaybeHung)
		} else {
			recheck = append(recheck, HungFactor*q-quietFor)
		}
	}

	switch req.Kind {
	case KindOutputSince:
		obs.Satisfied = sc.firstSince != 0
		if obs.Satisfied {
			obs.SeqFrom, obs.SeqTo = sc.firstSince, sc.lastSince
			obs.Detail += "output after the cursor"
		} else {
			obs.Final = done && !sinceBacklog
			obs.Detail += "no output after the cursor"
			if sinceBacklog {
				recheck = append(recheck, backlogRecheck)
			}
		}
	case KindOutputMatches:
		raw := joinTail(sc.tail, chunks, &sc.skipped)
		if req.Pattern.MatchString(StripANSI(raw)) {
			obs.Satisfied = true
			obs.Detail += "pattern matched in the output"
		} else if snap != nil && snap.Seq > req.SinceSeq && req.Pattern.MatchString(strings.Join(snap.Lines, "\n")) {
			obs.Satisfied = true
			obs.Detail += "pattern matched on the screen"
		} else {
			obs.Final = done
			obs.Detail += "no match yet"
		}
		if len(raw) > matchTailBytes {
			raw = raw[len(raw)-matchTailBytes:]
		}
		sc.tail = append(sc.tail[:0], raw...)
		if sc.firstSince != 0 {
			obs.SeqFrom = sc.firstSince
		}
	case KindQuiescent:
		obs.Satisfied = quietFor >= req.Quiet
		if obs.Satisfied {
			obs.Detail += "no output for the quiet window"
		} else {
			obs.Detail += "output within the quiet window"
			recheck = append(recheck, req.Quiet-quietFor)
		}
	case KindProcessAlive:
		obs.Satisfied = alive
		obs.Final = !alive && (done || phase.Terminal() || phase == session.PhaseClosing)
		obs.Detail += "session phase " + string(phase)
	case KindNoProgress:
		obs.Satisfied = quietFor >= req.Quiet && stalledFor >= req.Quiet
		if obs.Satisfied {
			obs.Detail += "no output and no screen change for the quiet window"
		} else {
			obs.Detail += "progress within the quiet window"
			wait := req.Quiet - quietFor
			if d := req.Quiet - stalledFor; d > wait {
				wait = d
			}
			recheck = append(recheck, wait)
		}
	}
	for _, d := range recheck {
		if d > 0 && (obs.RecheckAfter == 0 || d < obs.RecheckAfter) {
			obs.RecheckAfter = d
		}
	}
	return obs, nil
}

// scanSince looks for an output event in (max(since, sc.sinceCursor), upTo],
// at most sinceBatches x ScanEvents events per evaluation. It reports whether
// events are left to scan (the engine re-evaluates after backlogRecheck).
func (x *sessionSource) scanSince(r *ring.Ring, since, upTo uint64, sc *termScan) bool {
	c := max(since, sc.sinceCursor)
	for i := 0; i < sinceBatches && c < upTo; i++ {
		evs, next, _ := r.Read(c, ScanEvents)
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			if ev.Seq > upTo {
				break
			}
			if ev.Kind == ring.KindOutput {
				sc.firstSince = ev.Seq
				if sc.lastSince < ev.Seq {
					sc.lastSince = ev.Seq
				}
				return false
			}
		}
		c = next
	}
	sc.sinceCursor = c
	return c < upTo
}

// joinTail concatenates the carried tail and the new chunks, keeping at most
// ScanBytes of new output (the newest; the tail is dropped when new output is
// cut, as it is no longer contiguous).
func joinTail(tail []byte, chunks [][]byte, skipped *bool) []byte {
	n := 0
	start := len(chunks)
	for start > 0 && n+len(chunks[start-1]) <= ScanBytes {
		start--
		n += len(chunks[start])
	}
	cut := start > 0
	out := make([]byte, 0, len(tail)+n)
	if cut {
		*skipped = true
	} else {
		out = append(out, tail...)
	}
	for _, c := range chunks[start:] {
		out = append(out, c...)
	}
	return out
}

// promptLike reports whether the cursor sits at the end of its line and the
// line ends with a prompt-like suffix ("$ ", "# ", "> ", ": ", "? ", "% ",
// with or without the blank).
func promptLike(s *session.Snapshot) bool {
	if s.CursorHidden || s.CursorRow < 0 || s.CursorRow >= len(s.Lines) {
		return false
	}
	line := s.Lines[s.CursorRow]
	n := utf8.RuneCountInString(line)
	if n == 0 || s.CursorCol < n || s.CursorCol > n+1 {
		return false
	}
	for _, suf := range PromptSuffixes {
		if strings.HasSuffix(line, suf) {
			return true
		}
	}
	return false
}

// StripANSI removes terminal escape sequences (CSI, OSC, DCS/SOS/PM/APC and
// two-byte escapes), carriage returns and other C0 controls except newline
// and tab, so patterns match the text a human would read. An escape cut at
// the end of b is dropped.
func StripANSI(b []byte) string {
	var out strings.Builder
	out.Grow(len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != 0x1b {
			if c >= 0x20 || c == '\n' || c == '\t' {
				out.WriteByte(c)
			}
			continue
		}
		if i+1 >= len(b) {
			break
		}
		switch b[i+1] {
		case '[': // CSI: parameters and intermediates, then a final byte 0x40-0x7e
			j := i + 2
			for j < len(b) && (b[j] < 0x40 || b[j] > 0x7e) {
				j++
			}
			i = j
		case ']', 'P', 'X', '^', '_': // string: until BEL or ST (ESC \)
			j := i + 2
			for j < len(b) {
				if b[j] == 0x07 {
					break
				}
				if b[j] == 0x1b && j+1 < len(b) && b[j+1] == '\\' {
					j++
					break
				}
				j++
			}
			i = j
		default: // ESC, intermediates 0x20-0x2f, final
			j := i + 1
			for j < len(b) && b[j] >= 0x20 && b[j] <= 0x2f {
				j++
			}
			i = j
		}
	}
	return out.String()
}
