package integration

import (
	"sync/atomic"
	"time"
)

// clock is the manager's time source in this suite: the wall clock plus an offset a test
// may advance and must set back when it ends (the suite's tests run one at a time; a later
// test's consent requests and TTLs are measured on the wall clock).
var clock advancingClock

type advancingClock struct{ offset atomic.Int64 }

func (c *advancingClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// Advance moves the manager's clock by d (negative: back).
func (c *advancingClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }
