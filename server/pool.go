package server

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gymserver/gymserver/envs/sandbox"
)

// poolStater is a sandbox provider that reports its warm pools
// (docker.Provider, fleet.Fleet).
type poolStater interface {
	PoolStats() sandbox.PoolStats
}

// providerHolder is an environment that tells its sandbox provider
// (envs.TaskEnv).
type providerHolder interface {
	SandboxProvider() sandbox.Provider
}

// poolStaters returns the distinct providers of reg's environments that
// report their warm pools.
func poolStaters(reg Registry) []poolStater {
	var out []poolStater
	for _, spec := range reg.Specs() {
		env, err := reg.Lookup(spec.ID)
		if err != nil {
			continue
		}
		h, ok := env.(providerHolder)
		if !ok {
			continue
		}
		if ps, ok := h.SandboxProvider().(poolStater); ok && !slices.Contains(out, ps) {
			out = append(out, ps)
		}
	}
	return out
}

// poolTotals sums the warm pools of the server's providers by
// environment and by engine (engines only when a provider has several).
// A pool that environments share counts in each of them. An environment
// has no entry until a reset of it asks for a pool, and none at all
// without a warm pool.
func (s *Server) poolTotals() (byEnv, byEngine map[string]*sandbox.PoolCounts) {
	byEnv, byEngine = map[string]*sandbox.PoolCounts{}, map[string]*sandbox.PoolCounts{}
	for _, ps := range s.pools {
		for _, p := range ps.PoolStats().Pools {
			for _, env := range p.Envs {
				addCounts(byEnv, env, p.PoolCounts)
			}
			if p.Engine != "" {
				addCounts(byEngine, p.Engine, p.PoolCounts)
			}
		}
	}
	return byEnv, byEngine
}

// addCounts adds c to the sums of key in m.
func addCounts(m map[string]*sandbox.PoolCounts, key string, c sandbox.PoolCounts) {
	if m[key] == nil {
		m[key] = &sandbox.PoolCounts{}
	}
	m[key].Add(c)
}

// The warm-pool metrics, by environment.
var (
	descPoolTarget = prometheus.NewDesc("gymserver_pool_target",
		"Ready sandboxes the warm pools of the environment are kept at.", []string{"env"}, nil)
	descPoolReady = prometheus.NewDesc("gymserver_pool_ready",
		"Started sandboxes waiting in the warm pools of the environment.", []string{"env"}, nil)
	descPoolStarting = prometheus.NewDesc("gymserver_pool_starting",
		"Sandboxes being started for the warm pools of the environment.", []string{"env"}, nil)
	descPoolCreated = prometheus.NewDesc("gymserver_pool_created",
		"Containers created, not started, waiting for the environment.", []string{"env"}, nil)
	descPoolResets = prometheus.NewDesc("gymserver_pool_resets_total",
		"Sandboxes handed out for the environment, by source: pool (ready from the warm pool) or cold (started for the request).",
		[]string{"env", "source"}, nil)
	descPoolRecycles = prometheus.NewDesc("gymserver_pool_recycles_total",
		"Closed sandboxes of the environment put back for another session (outcome recycled) or removed because they could not be shown clean (not_recycled); see serve --reuse.",
		[]string{"env", "outcome"}, nil)
	descRemoving = prometheus.NewDesc("gymserver_containers_removing",
		"Containers of closed sessions being removed in the background.", nil, nil)
	descRemoveErrors = prometheus.NewDesc("gymserver_remove_errors_total",
		"Container removals that failed after a retry, left to the janitor or a reaper.", nil, nil)
)

// poolCollector reports the warm pools of a server in /metrics.
type poolCollector struct{ s *Server }

// Describe sends the descriptions of the warm-pool metrics.
func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPoolTarget, descPoolReady, descPoolStarting, descPoolCreated, descPoolResets, descPoolRecycles, descRemoving, descRemoveErrors} {
		ch <- d
	}
}

// Collect sends the warm-pool and removal metrics.
func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	var removing, removeErrors float64
	for _, ps := range c.s.pools {
		st := ps.PoolStats()
		removing += float64(st.Removing)
		removeErrors += float64(st.RemoveErrors)
	}
	ch <- prometheus.MustNewConstMetric(descRemoving, prometheus.GaugeValue, removing)
	ch <- prometheus.MustNewConstMetric(descRemoveErrors, prometheus.CounterValue, removeErrors)
	byEnv, _ := c.s.poolTotals()
	for env, t := range byEnv {
		ch <- prometheus.MustNewConstMetric(descPoolTarget, prometheus.GaugeValue, float64(t.Target), env)
		ch <- prometheus.MustNewConstMetric(descPoolReady, prometheus.GaugeValue, float64(t.Ready), env)
		ch <- prometheus.MustNewConstMetric(descPoolStarting, prometheus.GaugeValue, float64(t.Starting), env)
		ch <- prometheus.MustNewConstMetric(descPoolCreated, prometheus.GaugeValue, float64(t.Created), env)
		ch <- prometheus.MustNewConstMetric(descPoolResets, prometheus.CounterValue, float64(t.FromPool), env, "pool")
		ch <- prometheus.MustNewConstMetric(descPoolResets, prometheus.CounterValue, float64(t.Cold), env, "cold")
		ch <- prometheus.MustNewConstMetric(descPoolRecycles, prometheus.CounterValue, float64(t.Recycled), env, "recycled")
		ch <- prometheus.MustNewConstMetric(descPoolRecycles, prometheus.CounterValue, float64(t.NotRecycled), env, "not_recycled")
	}
}
