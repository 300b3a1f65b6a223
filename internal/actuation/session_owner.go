package actuation

// SessionUse is what decides whether a terminal session belongs to one principal: who
// created it (stamped at admission from the request's user, never chosen by a client) and
// whether it is that principal's terminal — it runs an interactive program
// (shellProfileRef), takes raw input (rawInput OperatorOnly), or is published as a view
// (a TerminalView names it).
type SessionUse struct {
	// Owner is the username that created the session ("" when none was recorded).
	Owner string
	// PTYProgram: the session runs an interactive program on its PTY.
	PTYProgram bool
	// RawInput: the session takes raw keystrokes from an operator.
	RawInput bool
	// Published: at least one TerminalView shares the session's screen.
	Published bool
}

// Personal tells whether the session is someone's terminal, which only its owner's
// commands may write into.
func (s SessionUse) Personal() bool { return s.PTYProgram || s.RawInput || s.Published }

// CheckSessionEmitter is the one rule of who may emit into a session (issue 25 item 6): a
// command whose creator is not the session's owner may not run in a personal session —
// its output would land on an operator's PTY screen, on the terminals attached to it, and
// in every frame of the views that share it. A session whose owner is unknown (created
// before owners were recorded) is nobody's to share: fail closed. A plain structured
// session (no PTY program, no raw input, not published) is a shared command log and
// admits any creator the profile admits.
func CheckSessionEmitter(s SessionUse, creator string) *Refusal {
	if !s.Personal() {
		return nil
	}
	why := "runs an interactive program"
	switch {
	case s.Published:
		why = "is published as a terminal view"
	case s.RawInput:
		why = "takes raw input"
	}
	switch {
	case s.Owner == "":
		return Refuse(CodeSessionNotOwned, "sessionRef", "the session %s and records no owner: only its owner's commands may write into it", why)
	case creator == "":
		return Refuse(CodeSessionNotOwned, "sessionRef", "the session %s and the command records no creator: only %q's commands may write into it", why, s.Owner)
	case creator != s.Owner:
		return Refuse(CodeSessionNotOwned, "sessionRef", "the session %s and belongs to %q: %q's command may not write into it (use a session of your own)", why, s.Owner, creator)
	}
	return nil
}
