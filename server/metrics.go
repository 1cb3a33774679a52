package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/server/wire"
)

// metrics are the server's Prometheus metrics, on a registry of its own.
type metrics struct {
	reg         *prometheus.Registry
	sessions    prometheus.Gauge
	connections prometheus.Gauge
	step        *prometheus.HistogramVec
	reset       *prometheus.HistogramVec
	snapshots   prometheus.Gauge
	snapshot    *prometheus.HistogramVec
	fork        *prometheus.HistogramVec
	requests    *prometheus.CounterVec
	queuedBytes prometheus.Gauge
	errors      *prometheus.CounterVec
}

// latencyBuckets span 50µs (a protocol-only step) to 20 minutes (a long
// command or a cold reset).
var latencyBuckets = prometheus.ExponentialBuckets(50e-6, 3, 16)

// newMetrics returns the metrics, with every labelled series of a known
// label value already present (at zero), so that dashboards and rate()
// see them before their first event: the ops and "unknown", the error
// codes, and envs (snapshot and fork only for the envs in forkers).
func newMetrics(containers func() float64, envs []string, forkers map[string]gym.Forker) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gymserver_sessions", Help: "Open sessions.",
		}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gymserver_connections", Help: "Open WebSocket connections.",
		}),
		step: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gymserver_step_seconds", Help: "Latency of step requests, by environment.", Buckets: latencyBuckets,
		}, []string{"env"}),
		reset: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gymserver_reset_seconds", Help: "Latency of successful resets (sandbox start), by environment.", Buckets: latencyBuckets,
		}, []string{"env"}),
		snapshots: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gymserver_snapshots", Help: "Snapshots held by connections.",
		}),
		snapshot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gymserver_snapshot_seconds", Help: "Latency of successful snapshots, by environment.", Buckets: latencyBuckets,
		}, []string{"env"}),
		fork: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gymserver_fork_seconds", Help: "Latency of each session started by fork (sandbox start from a snapshot), by environment.", Buckets: latencyBuckets,
		}, []string{"env"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gymserver_requests_total", Help: "Requests received, by op.",
		}, []string{"op"}),
		queuedBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gymserver_queued_request_bytes",
			Help: "Decoded size of the requests read and not yet answered, over all connections (each bounded by max_queued_bytes_per_connection).",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gymserver_errors_total", Help: "Error responses, by code (gym error class).",
		}, []string{"code"}),
	}
	m.reg.MustRegister(m.sessions, m.connections, m.step, m.reset, m.snapshots, m.snapshot, m.fork, m.requests, m.queuedBytes, m.errors,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gymserver_containers", Help: "Sandbox containers held by the server's sessions.",
		}, containers),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	for _, op := range append(wire.Ops(), unknownOp) {
		m.requests.WithLabelValues(op)
	}
	for _, c := range gym.Classes() {
		m.errors.WithLabelValues(string(c))
	}
	for _, env := range envs {
		m.step.WithLabelValues(env)
		m.reset.WithLabelValues(env)
		if _, ok := forkers[env]; ok {
			m.snapshot.WithLabelValues(env)
			m.fork.WithLabelValues(env)
		}
	}
	return m
}
