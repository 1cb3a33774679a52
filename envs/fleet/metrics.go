package fleet

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The per-engine metrics, labelled by engine name.
var (
	descUp = prometheus.NewDesc("gymserver_engine_up",
		"Whether the Docker Engine answered its last health check (1) or not (0).", []string{"engine"}, nil)
	descSessions = prometheus.NewDesc("gymserver_engine_sessions",
		"Live sandboxes on the Docker Engine.", []string{"engine"}, nil)
	descCapacity = prometheus.NewDesc("gymserver_engine_capacity",
		"Most live sandboxes placed on the Docker Engine.", []string{"engine"}, nil)
	descPlaced = prometheus.NewDesc("gymserver_engine_sandboxes_started_total",
		"Sandboxes started on the Docker Engine.", []string{"engine"}, nil)
	descDowns = prometheus.NewDesc("gymserver_engine_downs_total",
		"Times the Docker Engine failed a health check after passing one.", []string{"engine"}, nil)
	descTransfers = prometheus.NewDesc("gymserver_engine_image_transfers_total",
		"Image transfers (docker save | docker load) into the Docker Engine.", []string{"engine"}, nil)
	descTransferBytes = prometheus.NewDesc("gymserver_engine_image_transfer_bytes_total",
		"Bytes of the image transfers into the Docker Engine.", []string{"engine"}, nil)
	descTransferSeconds = prometheus.NewDesc("gymserver_engine_image_transfer_seconds_total",
		"Time spent in image transfers into the Docker Engine.", []string{"engine"}, nil)
)

var _ prometheus.Collector = (*Fleet)(nil)

// Describe sends the descriptions of the per-engine metrics.
func (f *Fleet) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descSessions, descCapacity, descPlaced, descDowns,
		descTransfers, descTransferBytes, descTransferSeconds} {
		ch <- d
	}
}

// Collect sends the per-engine metrics.
func (f *Fleet) Collect(ch chan<- prometheus.Metric) {
	f.mu.Lock()
	type gauges struct{ up, live, capacity float64 }
	g := make([]gauges, len(f.engines))
	for i, e := range f.engines {
		up := 0.0
		if e.up {
			up = 1
		}
		g[i] = gauges{up, float64(e.live), float64(e.capacity)}
	}
	f.mu.Unlock()
	for i, e := range f.engines {
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, g[i].up, e.name)
		ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, g[i].live, e.name)
		ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, g[i].capacity, e.name)
		ch <- prometheus.MustNewConstMetric(descPlaced, prometheus.CounterValue, float64(e.sessionsPlaced.Load()), e.name)
		ch <- prometheus.MustNewConstMetric(descDowns, prometheus.CounterValue, float64(e.downs.Load()), e.name)
		ch <- prometheus.MustNewConstMetric(descTransfers, prometheus.CounterValue, float64(e.transfers.Load()), e.name)
		ch <- prometheus.MustNewConstMetric(descTransferBytes, prometheus.CounterValue, float64(e.transferBytes.Load()), e.name)
		ch <- prometheus.MustNewConstMetric(descTransferSeconds, prometheus.CounterValue,
			time.Duration(e.transferNanos.Load()).Seconds(), e.name)
	}
}
