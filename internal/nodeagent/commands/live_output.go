package commands

import (
	"sync"

	"sensorium.dev/workbench/internal/nodeagent/ring"
)

// liveOutput appends a structured command's output to its session's event ring while the
// command runs, so output, quiescence and no-progress waits see a long build as it goes.
// Only retained output arrives here (procexec stops at the command's output cap), so the
// ring never receives more than the cap; the ring's own bounds evict the oldest events.
// Output of commands running concurrently in one session interleaves in the ring; the
// outcome's seqFrom..seqTo spans this command's first to last output event.
type liveOutput struct {
	rg *ring.Ring

	mu       sync.Mutex
	from, to uint64
}

// write is procexec's OnOutput callback (the pump goroutine).
func (l *liveOutput) write(b []byte) {
	last, err := l.rg.Append(ring.KindOutput, b)
	if err != nil || len(b) == 0 {
		return // the session's ring is closed: the output stays in the outcome digest only
	}
	chunk := min(ring.MaxEventData, l.rg.Config().MaxBytes)
	events := uint64((len(b) + chunk - 1) / chunk)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.from == 0 {
		l.from = last - events + 1
	}
	l.to = last
}

// bounds is the range of ring events this command's output occupies (0, 0 without output).
func (l *liveOutput) bounds() (from, to uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.from, l.to
}
