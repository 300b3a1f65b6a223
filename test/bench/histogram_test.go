package bench

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/webhooks"
)

// webhookMetric is kube-apiserver's own per-webhook admission latency histogram.
const webhookMetric = "apiserver_admission_webhook_admission_duration_seconds"

// histogram is one cumulative Prometheus histogram: upper bounds and cumulative counts.
type histogram struct {
	bounds []float64 // ascending, +Inf last
	counts []uint64  // cumulative
	count  uint64
	sum    float64
}

// webhookHistograms maps webhook name (summed over operation/type/rejected) to its histogram.
type webhookHistograms map[string]histogram

func scrapeWebhookHistograms(ctx context.Context, env *envtest.Env) (webhookHistograms, error) {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return nil, err
	}
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scrape kube-apiserver /metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse kube-apiserver /metrics: %w", err)
	}
	out := webhookHistograms{}
	fam, ok := families[webhookMetric]
	if !ok {
		return out, nil // no webhook called yet
	}
	for _, m := range fam.GetMetric() {
		name := label(m, "name")
		if label(m, "type") != "validating" && label(m, "type") != "admit" {
			continue
		}
		out[name] = out[name].add(fromDTO(m.GetHistogram()))
	}
	return out, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func fromDTO(h *dto.Histogram) histogram {
	var out histogram
	for _, b := range h.GetBucket() {
		out.bounds = append(out.bounds, b.GetUpperBound())
		out.counts = append(out.counts, b.GetCumulativeCount())
	}
	if len(out.bounds) == 0 || !math.IsInf(out.bounds[len(out.bounds)-1], 1) {
		out.bounds = append(out.bounds, math.Inf(1))
		out.counts = append(out.counts, h.GetSampleCount())
	}
	out.count, out.sum = h.GetSampleCount(), h.GetSampleSum()
	return out
}

// add sums two histograms with the same buckets (an empty one adopts the other's).
func (h histogram) add(o histogram) histogram {
	if len(h.bounds) == 0 {
		return histogram{bounds: append([]float64(nil), o.bounds...), counts: append([]uint64(nil), o.counts...), count: o.count, sum: o.sum}
	}
	for i := range h.counts {
		h.counts[i] += o.counts[i]
	}
	h.count += o.count
	h.sum += o.sum
	return h
}

func (w webhookHistograms) sub(before webhookHistograms) webhookHistograms {
	out := webhookHistograms{}
	for name, h := range w {
		b, ok := before[name]
		d := histogram{bounds: h.bounds, counts: append([]uint64(nil), h.counts...), count: h.count, sum: h.sum}
		if ok {
			for i := range d.counts {
				d.counts[i] -= b.counts[i]
			}
			d.count -= b.count
			d.sum -= b.sum
		}
		out[name] = d
	}
	return out
}

// quantile interpolates linearly within the bucket holding rank q*count, as PromQL's
// histogram_quantile does (the lowest bucket interpolates from 0).
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	rank := q * float64(h.count)
	for i, c := range h.counts {
		if float64(c) >= rank {
			lo, prev := 0.0, 0.0
			if i > 0 {
				lo, prev = h.bounds[i-1], float64(h.counts[i-1])
			}
			hi := h.bounds[i]
			if math.IsInf(hi, 1) {
				return lo
			}
			return lo + (hi-lo)*(rank-prev)/(float64(c)-prev)
		}
	}
	return h.bounds[len(h.bounds)-2]
}

// fractionWithin is the share of admissions in buckets with upper bound <= le.
func (h histogram) fractionWithin(le float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	var c uint64
	for i, b := range h.bounds {
		if b <= le {
			c = h.counts[i]
		}
	}
	return float64(c) / float64(h.count)
}

// gatherServerHistograms reads the webhook server's own histogram
// (webhooks.HandlerDurationMetric, by webhook path) from this process's metrics registry:
// the manager, and so the webhook server, runs in the benchmark's process.
func gatherServerHistograms() (webhookHistograms, error) {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return nil, fmt.Errorf("gathering the webhook server's metrics: %w", err)
	}
	out := webhookHistograms{}
	for _, fam := range families {
		if fam.GetName() != webhooks.HandlerDurationMetric {
			continue
		}
		for _, m := range fam.GetMetric() {
			out[label(m, "webhook")] = fromDTO(m.GetHistogram())
		}
	}
	return out, nil
}

// webhookConnections lists the established TCP connections the webhook server (local port
// port) holds, by peer address, from /proc/net/tcp and tcp6. Comparing the lists before and
// after the measured admissions tells whether kube-apiserver reused its connections (no new
// TLS handshake) or opened new ones.
func webhookConnections(port int) (map[string]bool, error) {
	out := map[string]bool{}
	suffix := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		for _, line := range strings.Split(string(raw), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 4 || fields[3] != "01" || !strings.HasSuffix(fields[1], suffix) { // 01: ESTABLISHED
				continue
			}
			out[fields[2]] = true
		}
	}
	return out, nil
}
