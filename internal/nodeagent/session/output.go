package session

import (
	"io"

	"github.com/charmbracelet/x/vt"

	"sensorium.dev/workbench/internal/nodeagent/ring"
)

// pumpSlab is the largest buffer the output pump reads into, chunk after chunk, handing
// each chunk to the ring without a copy (ring.AppendOwned): one allocation per slab (every
// ~8 full reads), not one per read. Slabs start at one read (4 KiB, what an idle session
// holds, as its read buffer did) and double while output keeps coming. A slab lives while
// the ring retains an event in it; a new slab is started when less than one read is left,
// so the memory output pins stays within the ring's retained bytes plus 1/7 of them and a
// few slabs.
const pumpSlab = 32 << 10

func (s *Session) pumpOutput() {
	defer close(s.pumpDone)
	defer s.m.releaseReader()
	var slab []byte
	size := ring.MaxEventData
	for {
		if cap(slab)-len(slab) < ring.MaxEventData {
			slab = make([]byte, 0, size)
			size = min(2*size, pumpSlab)
		}
		buf := slab[len(slab) : len(slab)+ring.MaxEventData]
		n, err := s.master.Read(buf)
		if n > 0 {
			s.onOutput(buf[:n:n]) // the ring owns these bytes: the next read starts after them
			slab = slab[:len(slab)+n]
		}
		if err != nil {
			s.pumpErr = err
			return
		}
	}
}

func (s *Session) onOutput(b []byte) {
	// The screen model is fed from the ring on demand (Screen, Resize), not here: the PTY
	// read path only appends, so output throughput is bounded by the ring, not the parser.
	_, _ = s.ring.AppendOwned(ring.KindOutput, b)
	s.lastOutput.Store(s.sinceStart())
	if s.Phase() == PhaseIdle && s.setPhase(PhaseRunning, "output") {
		s.mu.Lock()
		if s.idleTimer != nil && !s.reaped {
			s.idleTimer.Reset(s.spec.IdleTimeout)
		}
		s.mu.Unlock()
	}
}

// drainReplies consumes the emulator's answers to terminal queries (device
// attributes, cursor reports). They are discarded: only the operator or an
// explicit input directive may write to the program.
func (s *Session) drainReplies(emu *vt.Emulator) {
	defer close(s.replyDone)
	_, _ = io.Copy(io.Discard, emu)
}
