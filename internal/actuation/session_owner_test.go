package actuation

import "testing"

func TestCheckSessionEmitter(t *testing.T) {
	for _, c := range []struct {
		name    string
		use     SessionUse
		creator string
		refused bool
	}{
		{"structured session, another creator", SessionUse{Owner: "op"}, "agent", false},
		{"structured session, no owner recorded", SessionUse{}, "agent", false},
		{"PTY program, owner", SessionUse{Owner: "op", PTYProgram: true}, "op", false},
		{"PTY program, another creator", SessionUse{Owner: "op", PTYProgram: true}, "agent", true},
		{"raw input, another creator", SessionUse{Owner: "op", RawInput: true}, "agent", true},
		{"published, another creator", SessionUse{Owner: "op", Published: true}, "agent", true},
		{"published, owner", SessionUse{Owner: "op", Published: true}, "op", false},
		{"published, no owner recorded", SessionUse{Published: true}, "agent", true},
		{"published, no creator recorded", SessionUse{Owner: "op", Published: true}, "", true},
		{"PTY program, neither recorded", SessionUse{PTYProgram: true}, "", true},
	} {
		r := CheckSessionEmitter(c.use, c.creator)
		if (r != nil) != c.refused {
			t.Errorf("%s: refusal %v, want refused=%v", c.name, r, c.refused)
		}
		if r != nil && r.Code != CodeSessionNotOwned {
			t.Errorf("%s: code %s", c.name, r.Code)
		}
	}
}
