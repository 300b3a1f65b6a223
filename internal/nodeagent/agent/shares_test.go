package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCapSharesConfig: absent keys share nothing; an empty key shares with the data
// plane streams' defaults (a quarter reserved for operators, half the rest per identity);
// shares that leave no room are refused when the agent is built.
func TestCapSharesConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("stateDir: /x\nsessionShares: {}\ncommandShares:\n  perIdentity: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newIdentityShares(Caps{Sessions: 16, ConcurrentCommands: 8}, c.SessionShares, c.CommandShares)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.sessions.Shares(); got.OperatorReserve != 4 || got.PerIdentity != 6 {
		t.Errorf("default session shares of 16: %+v, want reserve 4, 6 per identity", got)
	}
	if got := s.commands.Shares(); got.OperatorReserve != 2 || got.PerIdentity != 5 {
		t.Errorf("command shares of 8 with perIdentity 5: %+v, want reserve 2, 5 per identity", got)
	}
	if s, err := newIdentityShares(Caps{Sessions: 16, ConcurrentCommands: 8}, nil, nil); err != nil || s.sessions != nil || s.commands != nil {
		t.Errorf("absent shares: %+v %v, want no pools", s, err)
	}
	if _, err := newIdentityShares(Caps{Sessions: 4, ConcurrentCommands: 8}, &CapShares{OperatorReserve: 4}, nil); err == nil {
		t.Error("a reserve of the whole session cap was accepted")
	}
}
