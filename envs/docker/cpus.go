package docker

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Sandboxes are pinned to cores (a cpuset), unless Options.FloatCPUs is
// set.
//
// Why: on this project's hosts (Linux 6.18, the EEVDF scheduler, cgroup
// v1), when a sandbox's processes are spread over several cores, a
// runnable process of one sandbox can wait hundreds of milliseconds on a
// core's run queue while other sandboxes' processes run; perf sched
// showed a command just forked by the executor wait 400 ms on one core
// and run at once after migrating to the other. It is not the CPU quota
// (no period was throttled, and removing the quota changed nothing), nor
// the attach stream or the server: the executor's own timing of the
// command held the wait. With each sandbox on its own core(s), 8 and 32
// sessions stepping at once are served fairly (BenchmarkStepSessions,
// its exec_floating arm beside it).
//
// A sandbox gets ceil(Resources.CPUs) cores, at most all of them, so its
// quota can still be spent in full. Balance is by count, not by load: a
// new container goes to the cores with the fewest sandboxes serving a
// session, then the fewest live ones (warm, created and recycled ones
// count there); a reset served from the warm pool or by a recycled
// sandbox takes the one whose cores serve the fewest sessions. A
// provider knows only its own sandboxes; among cores of equal count it
// prefers them in an order of its own, drawn at random, so that several
// processes sharing an engine do not all start on the same cores.

// cpuPins assigns cores to sandboxes.
type cpuPins struct {
	mu sync.Mutex
	// users counts the live sandboxes pinned to each core; nil when
	// pinning is off.
	users []int
	// rank orders cores of equal count: lower first.
	rank []int
	// busy counts, for each core, the sandboxes pinned to it that serve
	// a session; active holds their container ids.
	busy   []int
	active map[string]bool
	// held are the cores of each container, by id.
	held map[string][]int
}

// newCPUPins returns the pins of an engine with n cores; with n < 2 or
// off, pinning is off.
func newCPUPins(n int, off bool) *cpuPins {
	c := &cpuPins{held: map[string][]int{}, active: map[string]bool{}}
	if n >= 2 && !off {
		c.users = make([]int, n)
		c.busy = make([]int, n)
		c.rank = rand.Perm(n)
	}
	return c
}

// take picks the cores for a sandbox of cpus CPUs and returns them with
// their cpuset ("" and nil when pinning is off). The caller gives them to
// hold once the container exists, or back to put if it was not made.
func (c *cpuPins) take(cpus float64) (string, []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.users == nil {
		return "", nil
	}
	k := min(max(int(math.Ceil(cpus)), 1), len(c.users))
	order := make([]int, len(c.users))
	for i := range order {
		order[i] = i
	}
	// Fewest sessions first, then fewest sandboxes; among equals, the
	// lowest rank.
	slices.SortFunc(order, func(a, b int) int {
		if d := c.busy[a] - c.busy[b]; d != 0 {
			return d
		}
		if d := c.users[a] - c.users[b]; d != 0 {
			return d
		}
		return c.rank[a] - c.rank[b]
	})
	cores := order[:k]
	slices.Sort(cores)
	for _, i := range cores {
		c.users[i]++
	}
	return cpuset(cores), cores
}

// hold records that container id holds cores.
func (c *cpuPins) hold(id string, cores []int) {
	if len(cores) == 0 {
		return
	}
	c.mu.Lock()
	c.held[id] = cores
	c.mu.Unlock()
}

// put gives back cores taken for a container that was not made.
func (c *cpuPins) put(cores []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.release(cores)
}

// drop gives back the cores of container id, once it is removed.
func (c *cpuPins) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setActive(id, false)
	c.release(c.held[id])
	delete(c.held, id)
}

// serve records that container id serves a session (on) or no longer
// does (off).
func (c *cpuPins) serve(id string, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setActive(id, on)
}

// setActive is serve with c.mu held.
func (c *cpuPins) setActive(id string, on bool) {
	if c.active[id] == on || c.busy == nil {
		return
	}
	d := -1
	if on {
		d = 1
		c.active[id] = true
	} else {
		delete(c.active, id)
	}
	for _, i := range c.held[id] {
		if i < len(c.busy) {
			c.busy[i] += d
		}
	}
}

// load returns how many sessions the cores of container id serve, on
// average over its cores (0 when it is not pinned).
func (c *cpuPins) load(id string) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	cores := c.held[id]
	if len(cores) == 0 || c.busy == nil {
		return 0
	}
	n := 0
	for _, i := range cores {
		if i < len(c.busy) {
			n += c.busy[i]
		}
	}
	return float64(n) / float64(len(cores))
}

// release gives back cores; c.mu is held.
func (c *cpuPins) release(cores []int) {
	for _, i := range cores {
		if i < len(c.users) && c.users[i] > 0 {
			c.users[i]--
		}
	}
}

// disable turns pinning off, for an engine that refused a cpuset; the
// sandboxes pinned so far keep their cores.
func (c *cpuPins) disable() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.users, c.busy = nil, nil
}

// usage returns how many live sandboxes are pinned to each core (nil
// when pinning is off).
func (c *cpuPins) usage() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.users)
}

// cpuset formats cores as the engine's cpuset list, e.g. "0,2".
func cpuset(cores []int) string {
	s := make([]string, len(cores))
	for i, c := range cores {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// noCpuset reports whether a create failed because the engine refused
// the cpuset (e.g. its cgroup may not use every core it reports); the
// provider then stops pinning.
func (p *Provider) noCpuset(err error) bool {
	msg := strings.ToLower(err.Error())
	if !strings.Contains(msg, "cpuset") && !strings.Contains(msg, "cpus are not available") {
		return false
	}
	p.pins.disable()
	p.log.Warn("the engine refused a cpuset; sandboxes are no longer pinned to cores", "err", err)
	return true
}

// CPUPins returns how many live sandboxes are pinned to each core of the
// engine's host, or nil when sandboxes float (Options.FloatCPUs, a host
// with one core, or an engine that refused a cpuset).
func (p *Provider) CPUPins() []int { return p.pins.usage() }
