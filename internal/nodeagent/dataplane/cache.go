package dataplane

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"time"
)

// Cache bounds shared by the authentication and authorization caches.
const (
	// MaxCacheEntries caps every decision cache.
	MaxCacheEntries = 1024
	// MaxCacheTTL caps how long a positive decision is reused: a revoked
	// token or RoleBinding keeps working for at most this long.
	MaxCacheTTL = 10 * time.Second
)

type cacheKey [sha256.Size]byte

// keyOf hashes length-prefixed parts, so ("ab","c") and ("a","bc") differ
// and no secret (a token) is kept as a map key.
func keyOf(parts ...string) cacheKey {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var k cacheKey
	h.Sum(k[:0])
	return k
}

// ttlLRU is a bounded least-recently-used map whose entries expire after ttl.
// A zero ttl disables it (get always misses, add is a no-op).
type ttlLRU[V any] struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu sync.Mutex
	ll *list.List // front = most recently used
	m  map[cacheKey]*list.Element
}

type lruEntry[V any] struct {
	key     cacheKey
	val     V
	expires time.Time
}

func newTTLLRU[V any](max int, ttl time.Duration, now func() time.Time) *ttlLRU[V] {
	if now == nil {
		now = time.Now
	}
	return &ttlLRU[V]{ttl: ttl, max: max, now: now, ll: list.New(), m: map[cacheKey]*list.Element{}}
}

func (c *ttlLRU[V]) get(k cacheKey) (V, bool) {
	var zero V
	if c.ttl <= 0 {
		return zero, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[k]
	if !ok {
		return zero, false
	}
	e := el.Value.(*lruEntry[V])
	if !c.now().Before(e.expires) {
		c.ll.Remove(el)
		delete(c.m, k)
		return zero, false
	}
	c.ll.MoveToFront(el)
	return e.val, true
}

func (c *ttlLRU[V]) add(k cacheKey, v V) {
	if c.ttl <= 0 || c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	exp := c.now().Add(c.ttl)
	if el, ok := c.m[k]; ok {
		e := el.Value.(*lruEntry[V])
		e.val, e.expires = v, exp
		c.ll.MoveToFront(el)
		return
	}
	c.m[k] = c.ll.PushFront(&lruEntry[V]{key: k, val: v, expires: exp})
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.m, old.Value.(*lruEntry[V]).key)
	}
}

func (c *ttlLRU[V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}
