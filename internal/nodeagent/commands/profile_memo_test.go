package commands

import (
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

func memoProfile(name, rv string) *wbv1.CommandProfile {
	return &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

// TestProfileMemoExpiresAndIsBounded: an entry is returned (as a copy) only within
// profileMemoTTL of its read, drop forgets it, and the memo never holds more than
// profileMemoCap entries (the oldest goes).
func TestProfileMemoExpiresAndIsBounded(t *testing.T) {
	pm := newProfileMemo()
	t0 := time.Unix(1000, 0)
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	pm.put(memoProfile("p", "1"), t0)
	got := pm.get(key, t0.Add(profileMemoTTL))
	if got == nil || got.ResourceVersion != "1" {
		t.Fatalf("get within the TTL = %v", got)
	}
	got.ResourceVersion = "changed"
	if again := pm.get(key, t0); again.ResourceVersion != "1" {
		t.Fatalf("the memo's entry changed through a returned copy: %q", again.ResourceVersion)
	}
	if got := pm.get(key, t0.Add(profileMemoTTL+time.Nanosecond)); got != nil {
		t.Fatalf("get after the TTL = %v, want nil", got)
	}
	if got := pm.get(key, t0.Add(-time.Second)); got != nil {
		t.Fatalf("get before the read = %v, want nil", got)
	}
	pm.drop(key)
	if got := pm.get(key, t0); got != nil {
		t.Fatalf("get after drop = %v", got)
	}
	for i := 0; i < profileMemoCap+10; i++ {
		pm.put(memoProfile("q"+strconv.Itoa(i), "1"), t0.Add(time.Duration(i)*time.Millisecond))
	}
	if n := pm.len(); n != profileMemoCap {
		t.Fatalf("memo holds %d entries, cap %d", n, profileMemoCap)
	}
	now := t0.Add(time.Duration(profileMemoCap+10) * time.Millisecond)
	if pm.get(types.NamespacedName{Namespace: "ns", Name: "q0"}, now) != nil {
		t.Fatal("the oldest entry was kept at the cap")
	}
	if pm.get(types.NamespacedName{Namespace: "ns", Name: "q" + strconv.Itoa(profileMemoCap+9)}, now) == nil {
		t.Fatal("the newest entry was dropped at the cap")
	}
}
