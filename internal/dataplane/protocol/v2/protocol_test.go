package protocol

import (
	"net/http"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
)

func TestStatusCarriesTheCode(t *testing.T) {
	for _, c := range []struct {
		code   actuation.Code
		status int
	}{
		{actuation.CodeQueueFull, http.StatusTooManyRequests},
		{actuation.CodeForbidden, http.StatusForbidden},
		{actuation.CodePathNotFound, http.StatusNotFound},
		{actuation.CodeVMNotRunning, http.StatusServiceUnavailable},
		{actuation.CodePathTraversal, http.StatusBadRequest},
	} {
		if got := HTTPStatusOf(string(c.code)); got != c.status {
			t.Errorf("HTTPStatusOf(%s) = %d, want %d", c.code, got, c.status)
		}
		st := StatusFor(c.status, string(c.code), "because")
		if CodeOfStatus(st) != string(c.code) || st.Code != int32(c.status) || st.Message != string(c.code)+": because" {
			t.Errorf("StatusFor(%d, %s) = %+v", c.status, c.code, st)
		}
	}
	if st := StatusFor(http.StatusConflict, "x", "x: already prefixed"); st.Message != "x: already prefixed" {
		t.Errorf("a message that starts with its code is prefixed again: %q", st.Message)
	}
}

func TestSetForwardedUserReplacesIdentity(t *testing.T) {
	h := http.Header{}
	h.Set(HeaderRemoteUser, "mallory")
	h.Add(HeaderRemoteGroup, "system:masters")
	h.Set(HeaderRemoteExtraPrefix+"Evil", "1")
	SetForwardedUser(h, "alice", "", []string{"devs"}, nil)
	if h.Get(HeaderRemoteUser) != "alice" || len(h.Values(HeaderRemoteGroup)) != 1 || h.Get(HeaderRemoteExtraPrefix+"Evil") != "" || h.Get(HeaderRemoteUID) != "" {
		t.Fatalf("headers after SetForwardedUser: %v", h)
	}
}
