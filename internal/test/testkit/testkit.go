// Package testkit holds the small assertions every suite uses: fail on an error, poll a
// condition with a deadline, expect a refusal by its code, collect a process's output. It
// has no Kubernetes imports, so the domain cores' unit tests use it too.
package testkit

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
)

// PollInterval is how often Eventually re-evaluates its condition.
const PollInterval = 100 * time.Millisecond

// Must fails the test on a non-nil error.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Eventually polls cond until it holds or timeout passes, then fails saying what it waited
// for and what it last saw.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	EventuallyEvery(t, PollInterval, timeout, what, cond)
}

// EventuallyEvery is Eventually polling every interval (a real cluster's suites poll less
// often than PollInterval).
func EventuallyEvery(t testing.TB, interval, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last saw: %s", timeout, what, seen)
		}
		time.Sleep(interval)
	}
}

// MustRefuse fails unless err is a refusal carrying code.
func MustRefuse(t testing.TB, err error, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected refusal %q, got success", code)
	}
	if !strings.Contains(err.Error(), code) {
		t.Fatalf("expected refusal %q, got: %v", code, err)
	}
}

// WantCode fails unless err carries the stable refusal code (as actuation.CodeOf reads it).
func WantCode(t testing.TB, err error, code string) {
	t.Helper()
	if got := string(actuation.CodeOf(err)); got != code {
		t.Fatalf("code = %q (err: %v), want %q", got, err, code)
	}
}

// Ptr returns a pointer to a copy of v.
func Ptr[T any](v T) *T { return &v }

// LockedBuffer collects a process's output, written by exec's copying goroutine while the
// test reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
