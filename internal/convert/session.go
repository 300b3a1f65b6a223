package convert

import (
	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// SessionUse is what actuation.CheckSessionEmitter needs of a session: its owner, whether
// it runs a PTY program or takes raw input, and whether one of views (the TerminalViews of
// its namespace) publishes it.
func SessionUse(s *wbv1.TerminalSession, views []wbv1.TerminalView) actuation.SessionUse {
	u := actuation.SessionUse{
		Owner:      s.Spec.CreatedBy,
		PTYProgram: s.Spec.ShellProfileRef != nil,
		RawInput:   s.Spec.RawInput == wbv1.RawInputOperatorOnly,
	}
	for i := range views {
		if views[i].Spec.SessionRef == wbv1.ObjectName(s.Name) {
			u.Published = true
			break
		}
	}
	return u
}
