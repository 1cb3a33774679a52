package sandbox

// PoolStats is the state of a provider's warm pools (see
// docker.Options.WarmPool), as the dashboard and /metrics show it.
type PoolStats struct {
	// Pools are the pools of every spec a session was made for, by
	// engine when the provider has several.
	Pools []Pool `json:"pools"`
	// Removing are the closed sandboxes whose containers are being
	// removed; they still count as live until gone.
	Removing int `json:"removing"`
	// RemoveErrors counts the container removals that failed (after a
	// retry) and were left to the janitor or a reaper.
	RemoveErrors int64 `json:"remove_errors"`
}

// Pool is the state of one pool: the sandboxes kept for one Spec (the
// same but for the session, the task and the starter files).
type Pool struct {
	// Engine names the Docker Engine of the pool; "" for a provider of
	// one engine.
	Engine string `json:"engine,omitempty"`
	// Image is the image of the pool's sandboxes.
	Image string `json:"image"`
	// Envs are the environments whose sessions used the pool (the part
	// of LabelTask before its first "/").
	Envs []string `json:"envs"`
	PoolCounts
}

// PoolCounts are the numbers of one pool, or their sums over several.
type PoolCounts struct {
	// Target is the number of ready sandboxes the pool is kept at.
	Target int `json:"target"`
	// Ready are the started sandboxes waiting now; Starting those being
	// started for it.
	Ready    int `json:"ready"`
	Starting int `json:"starting"`
	// Created are the containers created, not started, waiting now.
	Created int `json:"created"`
	// FromPool counts the sandboxes handed out ready from the pool, Cold
	// those started for the request, since the provider opened.
	FromPool int64 `json:"from_pool"`
	Cold     int64 `json:"cold"`
	// Recycled counts the closed sandboxes put back into the pool for
	// another session, NotRecycled those that could not be (see
	// docker.Options.Reuse).
	Recycled    int64 `json:"recycled"`
	NotRecycled int64 `json:"not_recycled"`
}

// Add adds the numbers of o to c.
func (c *PoolCounts) Add(o PoolCounts) {
	c.Target += o.Target
	c.Ready += o.Ready
	c.Starting += o.Starting
	c.Created += o.Created
	c.FromPool += o.FromPool
	c.Cold += o.Cold
	c.Recycled += o.Recycled
	c.NotRecycled += o.NotRecycled
}
