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
	for _, off := range []*cpuPins{newCPUPins(1, false), newCPUPins(4, true)} {
		if got, cores := off.take(1); got != "" || cores != nil || off.usage() != nil {
			t.Errorf("pinning off: take = %q %v, usage %v", got, cores, off.usage())
		}
	}
}
