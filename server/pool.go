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

// uiPool sums warm pools: those of one environment, or of one engine.
type uiPool struct {
	Target   int   `json:"target"`
	Ready    int   `json:"ready"`
	Starting int   `json:"starting"`
	Created  int   `json:"created"`
	FromPool int64 `json:"from_pool"`
	Cold     int64 `json:"cold"`
}

func (u *uiPool) add(p sandbox.Pool) {
	u.Target += p.Target
	u.Ready += p.Ready
	u.Starting += p.Starting
	u.Created += p.Created
	u.FromPool += p.FromPool
	u.Cold += p.Cold
}

// poolTotals sums the warm pools of the server's providers by
// environment and by engine (engines only when a provider has several).
// A pool that environments share counts in each of them. An environment
// has no entry until a reset of it asks for a pool, and none at all
// without a warm pool.
func (s *Server) poolTotals() (byEnv, byEngine map[string]*uiPool) {
	byEnv, byEngine = map[string]*uiPool{}, map[string]*uiPool{}
	for _, ps := range s.pools {
		for _, p := range ps.PoolStats().Pools {
			for _, env := range p.Envs {
				t := byEnv[env]
				if t == nil {
					t = &uiPool{}
					byEnv[env] = t
				}
				t.add(p)
			}
			if p.Engine != "" {
				t := byEngine[p.Engine]
				if t == nil {
					t = &uiPool{}
					byEngine[p.Engine] = t
				}
				t.add(p)
			}
		}
	}
	return byEnv, byEngine
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
)

// poolCollector reports the warm pools of a server in /metrics.
type poolCollector struct{ s *Server }

// Describe sends the descriptions of the warm-pool metrics.
func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPoolTarget, descPoolReady, descPoolStarting, descPoolCreated, descPoolResets} {
		ch <- d
	}
}

// Collect sends the warm-pool metrics.
func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	byEnv, _ := c.s.poolTotals()
	for env, t := range byEnv {
		ch <- prometheus.MustNewConstMetric(descPoolTarget, prometheus.GaugeValue, float64(t.Target), env)
		ch <- prometheus.MustNewConstMetric(descPoolReady, prometheus.GaugeValue, float64(t.Ready), env)
		ch <- prometheus.MustNewConstMetric(descPoolStarting, prometheus.GaugeValue, float64(t.Starting), env)
		ch <- prometheus.MustNewConstMetric(descPoolCreated, prometheus.GaugeValue, float64(t.Created), env)
		ch <- prometheus.MustNewConstMetric(descPoolResets, prometheus.CounterValue, float64(t.FromPool), env, "pool")
		ch <- prometheus.MustNewConstMetric(descPoolResets, prometheus.CounterValue, float64(t.Cold), env, "cold")
	}
}
