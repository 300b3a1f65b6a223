// Package samples turns benchmark samples into percentiles and same-run ratios. Every figure
// the benchmarks report comes from individual samples (never a mean called a percentile),
// and every ratio divides by a floor sampled in the same process, interleaved with the
// product path.
package samples

import (
	"slices"
	"testing"
	"time"
)

// Durations is a set of samples of one path.
type Durations []time.Duration

// Quantile is the nearest-rank q-quantile (0 <= q <= 1) of the samples; 0 when empty.
func (d Durations) Quantile(q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Ms is a duration in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Us is a duration in microseconds.
func Us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// Report records p50 and p99 of the samples as <name>-p50-ms and <name>-p99-ms.
func (d Durations) Report(b *testing.B, name string) {
	b.ReportMetric(Ms(d.Quantile(0.50)), name+"-p50-ms")
	b.ReportMetric(Ms(d.Quantile(0.99)), name+"-p99-ms")
}

// Ratio reports the p50 ratio of path to floor (both sampled in this run) as
// <name>-p50-ratio, and the p99 ratio as <name>-p99-ratio.
func Ratio(b *testing.B, name string, path, floor Durations) {
	if f := floor.Quantile(0.50); f > 0 {
		b.ReportMetric(float64(path.Quantile(0.50))/float64(f), name+"-p50-ratio")
	}
	if f := floor.Quantile(0.99); f > 0 {
		b.ReportMetric(float64(path.Quantile(0.99))/float64(f), name+"-p99-ratio")
	}
}
