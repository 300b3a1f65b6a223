package store

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkCommandStartRecords measures what the node's command path asks of the store when
// many commands start at once: each of 16 goroutines (a node's command workers) records a
// command's start and then its outcome record (Commands().Put), as every command does.
// Reported: records/s for the 16 in flight, against the same 32 records written by one
// goroutine one after another (the floor of one write transaction and its fsyncs each).
func BenchmarkCommandStartRecords(b *testing.B) {
	const workers = 16
	db, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	one := func(i, w int) {
		c := Command{UID: fmt.Sprintf("u-%d-%d", i, w), Namespace: "ns", Name: fmt.Sprintf("c-%d-%d", i, w), SessionUID: "s", ArgvDigest: "d"}
		rec, created, err := db.RecordCommandStart(c)
		if err != nil || !created {
			b.Errorf("start record %s: created %v, %v", c.UID, created, err)
			return
		}
		rec.Phase = "Succeeded"
		if err := db.Commands().Put(rec); err != nil {
			b.Error(err)
		}
	}
	var serial, concurrent time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		for w := 0; w < workers; w++ {
			one(2*i, w)
		}
		serial += time.Since(t0)
		t1 := time.Now()
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() { defer wg.Done(); one(2*i+1, w) }()
		}
		wg.Wait()
		concurrent += time.Since(t1)
	}
	n := float64(2 * workers * b.N)
	b.ReportMetric(n/serial.Seconds(), "serial-records/s")
	b.ReportMetric(n/concurrent.Seconds(), "concurrent-records/s")
	b.ReportMetric(0, "ns/op")
}
