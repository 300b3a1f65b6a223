package agent

import (
	"fmt"

	"sensorium.dev/workbench/internal/nodeagent/ring"
)

// maxOutputRead bounds one read of recorded output.
const maxOutputRead = 4 << 20

// Output returns the recorded output bytes of a session between two sequence numbers
// (inclusive), as retained by the session's event ring; gap reports evicted events.
func (a *Agent) Output(sessionUID string, from, to uint64) (out []byte, gap *ring.Gap, err error) {
	rg := a.sessionRing(sessionUID)
	if rg == nil {
		return nil, nil, fmt.Errorf("session %s is not open on this node", sessionUID)
	}
	if from == 0 {
		return nil, nil, nil
	}
	cursor := from - 1 // Read returns events after the cursor
	for cursor < to && len(out) < maxOutputRead {
		evs, next, g := rg.Read(cursor, 256)
		if g != nil && gap == nil {
			gap = g
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			if e.Seq > to {
				return out, gap, nil
			}
			if e.Kind == ring.KindOutput {
				out = append(out, e.Data...)
			}
		}
		cursor = next
	}
	return out, gap, nil
}

// PrestartedSessionsTaken counts the sessions this agent opened on a pre-started sandbox
// helper (caps.prestartedSessions).
func (a *Agent) PrestartedSessionsTaken() uint64 { return a.sessions.PrestartedTaken() }
