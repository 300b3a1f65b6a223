// Package testkit holds the small assertions every suite uses: fail on an error, poll a
// condition with a deadline, make a fresh namespace, expect a refusal by its code.
package testkit

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	deadline := time.Now().Add(timeout)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last saw: %s", timeout, what, seen)
		}
		time.Sleep(PollInterval)
	}
}

// Namespace creates a fresh namespace named prefix plus a generated suffix.
func Namespace(t testing.TB, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace %s*: %v", prefix, err)
	}
	return ns.Name
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
