package envs_test

import (
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/waittest"
)

// TestReuseRewards runs calculator_api episodes on a provider that
// recycles sandboxes: an episode that solves the task, then, in the same
// container, one that submits the starter code at once. The second must
// score as it does in a fresh sandbox (checked on the same provider's
// first, cold, session of a no-op episode): nothing of the solution, nor
// of the hidden tests, nor of any process the first episode's services
// left, carries over.
func TestReuseRewards(t *testing.T) {
	p, _ := dockertest.NewWith(t, docker.Options{Reuse: 1})
	e, _, calls := calculatorEnvWith(t, p, nil)
	ctx := t.Context()
	noop := func(what string) float64 {
		t.Helper()
		s, _, err := e.Reset(ctx, gym.ResetRequest{})
		if err != nil {
			t.Fatal(err)
		}
		r := step(t, s, call(gym.ToolMarkDone, map[string]string{}))
		if _, err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		ev := r.Info.Evaluation
		if ev == nil || ev.Error != "" || ev.Tampered {
			t.Fatalf("%s: evaluation %+v", what, ev)
		}
		return ev.Reward
	}
	waitRecycled := func(n int64) {
		t.Helper()
		waittest.For(t, "the sandbox to be recycled", time.Minute, func() bool {
			st := p.PoolStats()
			return len(st.Pools) == 1 && st.Pools[0].Recycled == n && st.Pools[0].Ready == 1
		})
	}

	fresh := noop("a fresh sandbox")
	if fresh >= 1 {
		t.Fatalf("the starter code scores %v in a fresh sandbox: the test cannot tell", fresh)
	}
	waitRecycled(1)
	if _, _, err := episode(ctx, e, calls); err != nil {
		t.Fatal(err) // reward 1, in the recycled sandbox
	}
	waitRecycled(2)
	if got := noop("after a solved episode"); got != fresh {
		t.Errorf("the starter code scores %v in a recycled sandbox, %v in a fresh one", got, fresh)
	}
	st := p.PoolStats().Pools[0]
	if st.Cold != 1 || st.FromPool != 2 || st.NotRecycled != 0 {
		t.Errorf("pool counts %+v: want one cold start and two recycled sandboxes served", st)
	}
}
