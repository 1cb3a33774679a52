package docker

import (
	"slices"
	"testing"
)

// TestCPUPinsTake checks the choice of cores: fewest sandboxes first,
// then the provider's order; ceil(CPUs) cores, at most all; cores given
// back by put and drop; no pinning on one core or when turned off.
func TestCPUPinsTake(t *testing.T) {
	c := newCPUPins(4, false)
	c.rank = []int{1, 3, 0, 2} // core 2 first, then 0, 3, 1
	for _, step := range []struct {
		cpus float64
		want string
	}{
		{1, "2"},
		{0.5, "0"},
		// 3 and 1 have none; of 2 and 0 (one each), 2 comes first.
		{2.5, "1,2,3"},
		{9, "0,1,2,3"},
	} {
		if got, cores := c.take(step.cpus); got != step.want || cpuset(cores) != got {
			t.Fatalf("take(%v) = %q %v, want %q", step.cpus, got, cores, step.want)
		}
	}
	if u := c.usage(); !slices.Equal(u, []int{2, 2, 3, 2}) {
		t.Fatalf("usage %v, want [2 2 3 2]", u)
	}
	// Of 0, 1 and 3 (two each), 0 comes first.
	if got, cores := c.take(1); got != "0" {
		t.Fatalf("take(1) = %q %v, want core 0", got, cores)
	} else {
		c.hold("x", cores)
	}
	c.drop("x")
	c.drop("x") // a second drop gives nothing back
	c.put([]int{2})
	if u := c.usage(); !slices.Equal(u, []int{2, 2, 2, 2}) {
		t.Fatalf("usage after drop and put %v, want [2 2 2 2]", u)
	}

	// Sessions count first: with core 3 serving one, a new container goes
	// to one of the others (every core has two sandboxes; by rank, 2).
	c.hold("a", []int{3})
	c.serve("a", true)
	c.serve("a", true) // counted once
	if l := c.load("a"); l != 1 {
		t.Fatalf("load of a serving sandbox's core %v, want 1", l)
	}
	if got, _ := c.take(1); got != "2" {
		t.Fatalf("take(1) with core 3 serving a session = %q, want 2", got)
	}
	c.serve("a", false)
	if l := c.load("a"); l != 0 {
		t.Fatalf("load after the session ended %v, want 0", l)
	}
	c.serve("a", true)
	c.drop("a") // a removed sandbox serves nothing
	if l := c.load("a"); l != 0 || slices.Max(c.busy) != 0 {
		t.Fatalf("after drop: load %v, busy %v", l, c.busy)
	}

	for _, off := range []*cpuPins{newCPUPins(1, false), newCPUPins(4, true)} {
		if got, cores := off.take(1); got != "" || cores != nil || off.usage() != nil {
			t.Errorf("pinning off: take = %q %v, usage %v", got, cores, off.usage())
		}
	}
}
