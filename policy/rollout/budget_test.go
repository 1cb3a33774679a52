package rollout_test

import (
	"testing"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy"
	"github.com/gymserver/gymserver/policy/openaitest"
	"github.com/gymserver/gymserver/policy/rollout"
)

// busyEndpoint writes the answer at once, then keeps running commands, each
// answer costing 6+4 tokens.
func busyEndpoint(t *testing.T) *openaitest.Server {
	usage := &openaitest.Usage{PromptTokens: 6, CompletionTokens: 4, TotalTokens: 10}
	return openaitest.New(t, func(n int, _ openaitest.ChatRequest) openaitest.Reply {
		if n == 0 {
			return openaitest.Reply{Usage: usage, ToolCalls: []openaitest.ToolCall{
				openaitest.Call("w", "write_file", `{"filepath": "out.txt", "content": "hello"}`)}}
		}
		return openaitest.Reply{Usage: usage, ToolCalls: []openaitest.ToolCall{
			openaitest.Call("", "execute_command", `{"command": "echo again"}`)}}
	})
}

func TestBudgetEndsTheEpisodeTruncated(t *testing.T) {
	price := policy.DefaultConfig()
	price.Price = policy.Price{InputPer1K: 1, OutputPer1K: 1} // $0.01 per answer
	for _, tt := range []struct {
		name   string
		budget rollout.Budget
		calls  int
	}{
		{"tokens", rollout.Budget{MaxTokens: 25}, 3},
		{"cost", rollout.Budget{MaxCost: 0.02}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := busyEndpoint(t)
			sum := mustRun(t, runSpec{envs: []gym.Env{memEnv("mem")}, policy: llmPolicy(t, srv), budget: tt.budget, cost: price.Cost})
			if n := len(srv.Requests()); n != tt.calls {
				t.Errorf("%d policy calls, want %d", n, tt.calls)
			}
			tr := trajectory(t, sum, "mem", 0)
			er := tr.EpisodeResult
			// The tests ran on what the agent did before the budget ran out.
			if er.TerminatedReason != gym.ReasonBudget || !er.TerminatedReason.Truncation() || !er.Success || er.FinalScore != 1 || er.Mask {
				t.Errorf("episode result = %+v", er)
			}
			if tr.Usage.Calls != tt.calls || len(tr.Steps) != tt.calls {
				t.Errorf("usage %+v and %d steps, want %d calls: the last paid turn's calls run", tr.Usage, len(tr.Steps), tt.calls)
			}
			if got := sum.Stats.Overall.TerminationReasons[gym.ReasonBudget]; got != 1 {
				t.Errorf("stats count %d budget ends, want 1", got)
			}
		})
	}
}

func TestBudgetNeedsACostFunction(t *testing.T) {
	_, err := rollout.New(rollout.Options{
		Config: testConfig(nil), Envs: []gym.Env{memEnv("mem")}, ResultsPath: t.TempDir() + "/r.json",
		Policy: func(gym.EnvSpec, gym.TaskSpec) (gym.Policy, error) { return turnsPolicy(), nil },
		Budget: rollout.Budget{MaxCost: 1},
	})
	if err == nil {
		t.Fatal("a cost budget without a cost function was accepted")
	}
}
