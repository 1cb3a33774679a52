package envs_test

import (
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
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

// TestReuseHarbor runs a Harbor task's episodes on a provider that
// recycles sandboxes: its verifier directory is made so that a recycle
// can undo it, so the sandbox serves the task's next episode (a GRPO
// group's), and an empty episode after a solved one scores 0, as in a
// fresh sandbox; a task whose verifier runs as root is never recycled.
func TestReuseHarbor(t *testing.T) {
	dir := t.TempDir()
	answerTasks(t, dir)
	p, _ := dockertest.NewWith(t, docker.Options{Reuse: 1})
	e, _ := harborEnvOn(t, dir, p)
	counts := func() sandbox.PoolCounts {
		var c sandbox.PoolCounts
		for _, pool := range p.PoolStats().Pools {
			c.Add(pool.PoolCounts)
		}
		return c
	}
	episodeOf := func(task string, solve bool) float64 {
		t.Helper()
		s, _, err := e.Reset(t.Context(), gym.ResetRequest{Task: task})
		if err != nil {
			t.Fatal(err)
		}
		if solve {
			step(t, s, call(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: "answer.txt", Content: "42\n"}))
		}
		ev := markDone(t, s)
		if _, err := s.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if ev.ErrorClass != "" {
			t.Fatalf("%s: evaluation %+v", task, ev)
		}
		return ev.Reward
	}
	if r := episodeOf("answer", true); r != 1 {
		t.Fatalf("solved: reward %v", r)
	}
	waittest.For(t, "the sandbox to be recycled", time.Minute, func() bool { return counts().Recycled == 1 && counts().Ready == 1 })
	if r := episodeOf("answer", false); r != 0 {
		t.Errorf("an empty episode in the recycled sandbox: reward %v, want 0", r)
	}
	waittest.For(t, "the sandbox to be recycled again", time.Minute, func() bool { return counts().Recycled == 2 })
	if c := counts(); c.FromPool != 1 || c.NotRecycled != 0 {
		t.Errorf("pool counts %+v: want the second episode served recycled", c)
	}
	if r := episodeOf("answer-root", true); r != 1 {
		t.Fatalf("root verifier: reward %v", r)
	}
	waittest.For(t, "the root verifier's sandbox to be refused", time.Minute, func() bool { return counts().NotRecycled == 1 })
}
