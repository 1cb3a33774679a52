package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/server"
)

// customToolsConfig is the envs package's custom tools config: word_count,
// wait (1s timeout) and echo_args (a shell string), and a task "capped"
// with max_actions 3 that adds shout.
const customToolsConfig = "../envs/testdata/custom_tools/config.json"

// TestDockerCustomTools drives custom tools through the real server and
// the Go client: their schemas in envs and reset, a structured call and a
// call by each parser, a failing call, the timeout, a hostile argument
// that must not run, the action count and the cap.
func TestDockerCustomTools(t *testing.T) {
	p := dockerProvider(t)
	cfg, err := config.Load(customToolsConfig)
	if err != nil {
		t.Fatal(err)
	}
	uid := config.Tool{Name: "sandbox_user", Description: "Print the uid tools run as.", Command: []string{"id", "-u"}}
	reg, err := envs.NewRegistry(context.Background(), cfg, envs.Options{Provider: p, Tools: []config.Tool{uid}})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, server.Options{Registry: reg}, nil)
	c := dial(t, ts, gymclient.Options{})
	ctx := t.Context()

	env, err := c.Env(ctx, "custom_tools")
	if err != nil {
		t.Fatal(err)
	}
	names := func(tools []gym.Tool) string {
		var n []string
		for _, t := range tools {
			n = append(n, t.Function.Name)
		}
		return strings.Join(n, ",")
	}
	const envTools = "execute_command,write_file,read_file,mark_done,word_count,wait,echo_args,sandbox_user"
	if got := names(env.Spec().Tools); got != envTools {
		t.Errorf("envs tools = %s, want %s", got, envTools)
	}
	s, r, err := c.Reset(ctx, "custom_tools", gym.ResetRequest{Task: "count"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if got := names(r.Tools); got != envTools {
		t.Errorf("reset tools = %s, want %s", got, envTools)
	}
	if wc := r.Tools[4].Function.Parameters; wc.Properties["path"].Type != "string" || len(wc.Required) != 1 {
		t.Errorf("word_count parameters over the wire = %+v", wc)
	}

	actions := 0
	check := func(what string, res gym.StepResult, err error, want string) gym.CallInfo {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		actions++
		if len(res.Info.Calls) != 1 || res.Info.Actions != actions || !strings.Contains(res.Observation.Text, want) {
			t.Fatalf("%s: actions %d (want %d), calls %+v, observation:\n%s", what, res.Info.Actions, actions, res.Info.Calls, res.Observation.Text)
		}
		return res.Info.Calls[0]
	}
	const words = `{"path": "poem.txt", "words": 11}`
	res, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("w1", "word_count", `{"path": "poem.txt"}`)}})
	if ci := check("structured", res, err, words); ci.ID != "w1" || ci.ExitCode != 0 || res.Observation.Messages[0].Name != "word_count" {
		t.Errorf("structured call: %+v %+v", ci, res.Observation.Messages)
	}
	for parser, text := range map[string]string{
		"hermes": `<tool_call>{"name": "word_count", "arguments": {"path": "poem.txt"}}</tool_call>`,
		"json":   `{"name": "word_count", "arguments": {"path": "poem.txt"}}`,
		"react":  "Action: word_count\nAction Input: {\"path\": \"poem.txt\"}",
	} {
		res, calls, err := s.StepText(ctx, parser, text)
		check(parser, res, err, words)
		if len(calls) != 1 || calls[0].Function.Name != "word_count" {
			t.Errorf("%s: parsed calls %+v", parser, calls)
		}
	}
	res, err = s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("", "word_count", `{"path": "nope.txt"}`)}})
	if ci := check("missing file", res, err, "nope.txt: No such file or directory"); ci.ExitCode != 2 || ci.ErrorClass != "" {
		t.Errorf("missing file: %+v", ci)
	}
	res, err = s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("", "word_count", `{"path": ["a"]}`)}})
	if ci := check("wrong type", res, err, `argument "path" must be a string`); ci.ErrorClass != gym.ClassAgent {
		t.Errorf("wrong type: %+v", ci)
	}
	res, err = s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("", "wait", `{"seconds": 20}`)}})
	if ci := check("timeout", res, err, "Timed out after 1s"); ci.ErrorClass != gym.ClassToolTimeout {
		t.Errorf("timeout: %+v", ci)
	}
	hostile := "$(touch /tmp/pwned1); `touch /tmp/pwned2` && touch /tmp/pwned3 | sh; echo $HOME >/tmp/pwned4"
	args, _ := json.Marshal(map[string]string{"text": hostile})
	res, _, err = s.StepText(ctx, "hermes", `<tool_call>{"name": "echo_args", "arguments": `+string(args)+`}</tool_call>`)
	check("hostile", res, err, `"text":`)
	res, err = s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("", "execute_command", `{"command": "ls -a /tmp"}`)}})
	if check("ls /tmp", res, err, "Exit code: 0"); strings.Contains(res.Observation.Text, "pwned") {
		t.Fatalf("the hostile argument was executed:\n%s", res.Observation.Text)
	}
	res, err = s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{tc("", "sandbox_user", ``)}})
	if check("uid", res, err, "stdout:"); strings.Contains(res.Observation.Text, "stdout:\n0") {
		t.Errorf("a tool ran as root:\n%s", res.Observation.Text)
	}

	// The cap: task "capped" allows 3 actions, its own tool shout included.
	s2, r2, err := c.Reset(ctx, "custom_tools", gym.ResetRequest{Task: "capped"})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background())
	// Config tools (the environment's, then the task's), then code's.
	if got := names(r2.Tools); got != strings.Replace(envTools, "sandbox_user", "shout,sandbox_user", 1) {
		t.Errorf("capped reset tools = %s", got)
	}
	res, err = s2.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{
		tc("", "shout", `{"text": "a"}`), tc("", "shout", `{"text": "b"}`), tc("", "word_count", `{"path": "poem.txt"}`), tc("", "shout", `{"text": "late"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || res.Info.TerminationReason != gym.ReasonMaxActions || res.Info.Actions != 3 || strings.Contains(res.Observation.Text, "LATE") ||
		!strings.Contains(res.Observation.Text, "B") || res.Info.Calls[3].ErrorClass != gym.ClassEpisodeDone {
		t.Fatalf("capped: truncated %v reason %s actions %d calls %+v\n%s", res.Truncated, res.Info.TerminationReason, res.Info.Actions, res.Info.Calls, res.Observation.Text)
	}
}
