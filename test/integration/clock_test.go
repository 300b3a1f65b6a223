package integration

import (
	"sync/atomic"
	"time"
)

// clock is the manager's time source in this suite: the wall clock plus an offset a test
// may advance (never set back: the suite's tests run one at a time, and objects of earlier
// tests have only reached deadlines sooner).
var clock advancingClock

type advancingClock struct{ offset atomic.Int64 }

func (c *advancingClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// Advance moves the manager's clock forward by d.
func (c *advancingClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }
