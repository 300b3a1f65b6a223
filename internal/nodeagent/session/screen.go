package session

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/charmbracelet/x/vt"

	"sensorium.dev/workbench/internal/nodeagent/ring"
)

// Snapshot is a bounded viewport of the session's screen model (resolved
// decision 2: a viewport with cursor position and digests, never a full
// transcript). Lines holds at most Rows lines (trailing blank lines omitted),
// each at most Cols runes with trailing blanks trimmed.
type Snapshot struct {
	Rows, Cols   int
	Lines        []string
	CursorRow    int // 0-based
	CursorCol    int // 0-based
	CursorHidden bool
	AltScreen    bool
	// Seq is the last output event folded into this screen.
	Seq uint64
	// Digest is the hex sha256 of the viewport (size, lines, cursor).
	Digest string
	// OutputDigest / OutputBytes cover every output byte of the session,
	// including bytes evicted from the ring.
	OutputDigest string
	OutputBytes  uint64
}

// ScreenBuilt reports whether the screen model exists (a screen or a resize asked for
// it). Publishers that only mirror the screen (a status digest) check it first, so that
// they never build a model for a session nobody looks at.
func (s *Session) ScreenBuilt() bool {
	s.screenMu.Lock()
	defer s.screenMu.Unlock()
	return s.emu != nil
}

// Screen returns a snapshot of the current viewport.
func (s *Session) Screen() Snapshot {
	s.screenMu.Lock()
	s.ensureEmuLocked()
	s.catchUpLocked()
	cols, rows := s.emu.Width(), s.emu.Height()
	lines := make([]string, 0, rows)
	var b strings.Builder
	for y := range rows {
		b.Reset()
		pending := 0 // blanks not yet known to be non-trailing
		runes := 0
		for x := range cols {
			c := s.emu.CellAt(x, y)
			if c == nil || c.Content == "" { // wide-char continuation / unset
				continue
			}
			if c.Content == " " {
				pending++
				continue
			}
			n := utf8.RuneCountInString(c.Content)
			if runes+pending+n > cols {
				break
			}
			b.WriteString(strings.Repeat(" ", pending))
			runes += pending + n
			pending = 0
			b.WriteString(c.Content)
		}
		lines = append(lines, b.String())
	}
	pos := s.emu.CursorPosition()
	snap := Snapshot{
		Rows: rows, Cols: cols,
		CursorRow: pos.Y, CursorCol: pos.X,
		CursorHidden: s.emu.CursorHidden(),
		AltScreen:    s.emu.IsAltScreen(),
		Seq:          s.screenSeq,
	}
	s.screenMu.Unlock()

	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	snap.Lines = lines
	h := sha256.New()
	var hdr [16]byte
	binary.BigEndian.PutUint32(hdr[0:], uint32(rows))
	binary.BigEndian.PutUint32(hdr[4:], uint32(cols))
	binary.BigEndian.PutUint32(hdr[8:], uint32(snap.CursorRow))
	binary.BigEndian.PutUint32(hdr[12:], uint32(snap.CursorCol))
	h.Write(hdr[:])
	for _, l := range lines {
		h.Write([]byte(l))
		h.Write([]byte{'\n'})
	}
	snap.Digest = hex.EncodeToString(h.Sum(nil))
	snap.OutputDigest, snap.OutputBytes = s.ring.OutputDigest()
	return snap
}

// screenReadBatch bounds one ring read while the screen model catches up.
const screenReadBatch = 256

// catchUpLocked feeds the screen model the output the ring recorded since it last looked.
// The work is bounded by the ring's own caps (events, bytes, age). When the ring evicted
// output the model never saw, the model is reset (RIS) and rebuilt from what the ring
// retains: the viewport is then what that output draws, and screenGap says so.
func (s *Session) catchUpLocked() {
	for {
		evs, next, gap := s.ring.Read(s.screenSeq, screenReadBatch)
		if gap != nil {
			// The sizes in effect before the evicted output are unknown too: lay out what
			// is retained at the current size until a retained resize says otherwise.
			_, _ = s.emu.Write([]byte("\x1bc"))
			s.resizeEmuLocked(s.rows, s.cols)
			s.screenGap = true
		}
		for _, e := range evs {
			switch {
			case e.Kind == ring.KindOutput && len(e.Data) > 0:
				_, _ = s.emu.Write(e.Data)
			case e.Kind == ring.KindResize:
				var rows, cols uint16
				if _, err := fmt.Sscanf(string(e.Data), "%dx%d", &rows, &cols); err == nil {
					s.resizeEmuLocked(rows, cols)
				}
			}
		}
		s.screenSeq = next
		if len(evs) == 0 {
			return
		}
	}
}

// ensureEmuLocked builds the screen model the first time a screen is asked for: an
// emulator at the session's initial size that then replays the ring from its start
// (output and resizes in order; after an eviction, from what is retained). Until then an
// idle session holds no emulator, and the PTY read path only appends to the ring.
func (s *Session) ensureEmuLocked() {
	if s.emu != nil {
		return
	}
	s.emu = vt.NewEmulator(int(s.spec.Cols), int(s.spec.Rows))
	s.emu.SetScrollbackSize(1) // viewport only; the ring is the bounded history
	boundParser(s.emu)
	s.screenSeq = 0
	if s.screenClosed {
		// Cleaned up: nobody drains the emulator's replies, so they must fail, not block.
		if pw, ok := s.emu.InputPipe().(io.Closer); ok {
			_ = pw.Close()
		}
		return
	}
	go s.drainReplies(s.emu)
}

func (s *Session) resizeEmuLocked(rows, cols uint16) {
	if rows == 0 || cols == 0 || (s.emu.Height() == int(rows) && s.emu.Width() == int(cols)) {
		return
	}
	s.emu.Resize(int(cols), int(rows))
}
