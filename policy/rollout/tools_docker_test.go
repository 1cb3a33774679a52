package rollout_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy/openaitest"
)

// TestLLMCallsCustomToolsInDocker: the LLM policy is offered an
// environment's custom tools with their schemas, calls them natively, and
// the trajectory records each call as an action of the tool's name whose
// success follows its exit code.
func TestLLMCallsCustomToolsInDocker(t *testing.T) {
	cfg, err := config.Load(filepath.Join("..", "..", "envs", "testdata", "custom_tools", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Rollout.TaskFilter = "^custom_tools/count$"
	env, err := envs.New(cfg, cfg.Environments[0], envs.Options{Provider: testProvider(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv := openaitest.New(t, openaitest.Queue(t,
		openaitest.Calls(
			openaitest.Call("wc", "word_count", `{"path": "poem.txt"}`),
			openaitest.Call("wc_missing", "word_count", `{"path": "nope.txt"}`),
		),
		openaitest.Calls(openaitest.Call("write", "write_file", `{"filepath": "count.txt", "content": "11\n"}`)),
		openaitest.Calls(openaitest.Call("done", "mark_done", `{}`)),
	))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	sum, err := run(t, ctx, runSpec{cfg: cfg, envs: []gym.Env{env}, policy: llmPolicy(t, srv)})
	if err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	var schema json.RawMessage
	for _, tool := range reqs[0].Body.Tools {
		if tool.Function.Name == "word_count" {
			schema = tool.Function.Parameters
		}
	}
	if !strings.Contains(string(schema), `"required":["path"]`) || !strings.Contains(string(schema), `"path":{"type":"string"`) {
		t.Errorf("word_count schema sent to the model: %s", schema)
	}
	if replies := toolReplies(reqs[1]); len(replies) != 2 || !strings.Contains(replies[0].Content, `"words": 11`) ||
		!strings.Contains(replies[1].Content, "Exit code: 2") {
		t.Errorf("tool replies = %+v", replies)
	}
	tr := taskTrajectory(t, sum, "custom_tools", "count", 0)
	if len(tr.Steps) != 4 {
		t.Fatalf("%d steps, want 4", len(tr.Steps))
	}
	ok, failed := tr.Steps[0], tr.Steps[1]
	if ok.Action.Type != "word_count" || ok.Action.Content != `{"path": "poem.txt"}` || !ok.Result.Success || ok.Result.ExitCode != 0 {
		t.Errorf("word_count step = %+v", ok)
	}
	if failed.Action.Type != "word_count" || failed.Result.Success || failed.Result.ExitCode != 2 {
		t.Errorf("failing word_count step = %+v", failed)
	}
	if er := tr.EpisodeResult; !er.Success || er.FinalScore != 1 || er.Actions != 4 {
		t.Errorf("episode result = %+v", er)
	}
}
