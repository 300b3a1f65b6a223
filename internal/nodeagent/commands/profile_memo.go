package commands

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// The node's memo of CommandProfiles it read from the API server, so a command's fast-path
// admission does not wait for a profile read before its claim and sandbox start. A memo entry
// never admits on its own: the pass that used it reads the profile again from the API server
// while its claim is written (claimCurrent), and the program starts only when that read has
// the very resourceVersion the admission was decided against. A profile changed since the
// memo's read means the pass starts nothing and the next pass decides against the current
// profile.
const (
	// profileMemoCap bounds the memo; at the cap the oldest entry is dropped.
	profileMemoCap = 256
	// profileMemoTTL bounds how long an entry is used: a profile tightened since, in that
	// window, gets a command the old profile admitted refused at the node
	// (argv-not-admitted) rather than held for consent, because the node's claim landed
	// before the current profile was seen.
	profileMemoTTL = 2 * time.Second
)

type profileMemoEntry struct {
	prof *wbv1.CommandProfile
	at   time.Time
}

// profileMemo is the bounded, short-lived memo of profiles the node read.
type profileMemo struct {
	mu sync.Mutex
	m  map[types.NamespacedName]profileMemoEntry
}

func newProfileMemo() *profileMemo {
	return &profileMemo{m: map[types.NamespacedName]profileMemoEntry{}}
}

// get returns a copy of the profile read at most profileMemoTTL before now, or nil.
func (pm *profileMemo) get(key types.NamespacedName, now time.Time) *wbv1.CommandProfile {
	if pm == nil {
		return nil
	}
	pm.mu.Lock()
	defer pm.mu.Unlock()
	e, ok := pm.m[key]
	if !ok || now.Sub(e.at) > profileMemoTTL || now.Before(e.at) {
		return nil
	}
	return e.prof.DeepCopy()
}

// put records prof as read from the API server at now.
func (pm *profileMemo) put(prof *wbv1.CommandProfile, now time.Time) {
	if pm == nil {
		return
	}
	key := types.NamespacedName{Namespace: prof.Namespace, Name: prof.Name}
	pm.mu.Lock()
	defer pm.mu.Unlock()
	if _, ok := pm.m[key]; !ok && len(pm.m) >= profileMemoCap {
		var oldest types.NamespacedName
		first := true
		for k, e := range pm.m {
			if first || e.at.Before(pm.m[oldest].at) {
				oldest, first = k, false
			}
		}
		delete(pm.m, oldest)
	}
	pm.m[key] = profileMemoEntry{prof: prof.DeepCopy(), at: now}
}

// drop forgets key (the profile is gone).
func (pm *profileMemo) drop(key types.NamespacedName) {
	if pm == nil {
		return
	}
	pm.mu.Lock()
	defer pm.mu.Unlock()
	delete(pm.m, key)
}

func (pm *profileMemo) len() int {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	return len(pm.m)
}
