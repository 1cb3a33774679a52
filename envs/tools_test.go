package envs_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/envs/sandbox/sandboxtest"
	"github.com/gymserver/gymserver/gym"
)

// customToolsConfig declares word_count, wait and echo_args, and a task
// that adds shout.
const customToolsConfig = "testdata/custom_tools/config.json"

// hostile is an argument full of shell syntax: if any of it were run,
// files named pwned would appear in /tmp.
const hostile = "x; touch /tmp/pwned1 && $(touch /tmp/pwned2) `touch /tmp/pwned3` | touch /tmp/pwned4 & rm -rf /workspace\n'\"; touch /tmp/pwned5"

// sandboxUser is a tool registered in code (Options.Tools): it prints the
// uid it runs as.
var sandboxUser = config.Tool{
	Name:        "sandbox_user",
	Description: "Print the uid the tools run as.",
	Command:     []string{"id", "-u"},
}

func toolNamesOf(tools []gym.Tool) []string {
	var names []string
	for _, t := range tools {
		names = append(names, t.Function.Name)
	}
	return names
}

func customToolsEnv(t *testing.T, p sandbox.Provider) *envs.TaskEnv {
	t.Helper()
	cfg, err := config.Load(customToolsConfig)
	if err != nil {
		t.Fatal(err)
	}
	e, err := envs.New(cfg, cfg.Environments[0], envs.Options{Provider: p, Tools: []config.Tool{sandboxUser}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func resetToolTask(t *testing.T, e *envs.TaskEnv, task string) (gym.Session, gym.Reset) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	s, r, err := e.Reset(ctx, gym.ResetRequest{Task: task})
	if err != nil {
		t.Fatalf("reset %s: %v", task, err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, r
}

// TestCustomTools runs the custom tools of the test config on real Docker:
// their schemas, structured and parsed calls, output, errors, timeout,
// action count, the agent's uid, and arguments that are never executed.
func TestCustomTools(t *testing.T) {
	e := customToolsEnv(t, testProvider(t))
	std := toolNamesOf(gym.StandardTools())
	envTools := append(slices.Clone(std), "word_count", "wait", "echo_args", "sandbox_user")
	if got := toolNamesOf(e.Spec().Tools); !cmp.Equal(got, envTools) {
		t.Errorf("spec tools = %v, want %v", got, envTools)
	}
	s, r := resetToolTask(t, e, "count")
	if got := toolNamesOf(r.Tools); !cmp.Equal(got, envTools) {
		t.Errorf("reset tools = %v, want %v", got, envTools)
	}
	wc := r.Tools[4].Function
	if wc.Parameters.Required[0] != "path" || wc.Parameters.Properties["path"].Type != "string" || wc.Parameters.AdditionalProperties {
		t.Errorf("word_count schema = %+v", wc)
	}

	actions := 0
	// one steps one action and checks the running count of actions.
	one := func(a gym.Action) (gym.StepResult, gym.CallInfo) {
		t.Helper()
		res, err := s.Step(t.Context(), a)
		if err != nil {
			t.Fatalf("step %+v: %v", a, err)
		}
		actions += len(res.Info.Calls)
		if res.Info.Actions != actions || len(res.Info.Calls) != 1 || res.Done() {
			t.Fatalf("step %+v: actions %d (want %d), calls %+v, done %v", a, res.Info.Actions, actions, res.Info.Calls, res.Done())
		}
		return res, res.Info.Calls[0]
	}
	const words = `{"path": "poem.txt", "words": 11}`

	t.Run("structured", func(t *testing.T) {
		res, ci := one(gym.Action{ToolCalls: []gym.ToolCall{call("word_count", map[string]string{"path": "poem.txt"})}})
		if ci.ErrorClass != "" || ci.ExitCode != 0 || ci.Name != "word_count" || !strings.Contains(res.Observation.Text, words) {
			t.Fatalf("word_count: %+v\n%s", ci, res.Observation.Text)
		}
		if m := res.Observation.Messages; len(m) != 1 || m[0].Name != "word_count" || m[0].ToolCallID != ci.ID || m[0].Content != res.Observation.Text {
			t.Errorf("tool message = %+v", m)
		}
	})
	for _, tc := range []struct{ parser, text string }{
		{"hermes", `I will count. <tool_call>{"name": "word_count", "arguments": {"path": "poem.txt"}}</tool_call>`},
		{"json", "```json\n{\"name\": \"word_count\", \"arguments\": {\"path\": \"poem.txt\"}}\n```"},
		{"react", "Thought: count it.\nAction: word_count\nAction Input: {\"path\": \"poem.txt\"}"},
	} {
		t.Run("parser/"+tc.parser, func(t *testing.T) {
			res, ci := one(gym.Action{Parser: tc.parser, Text: tc.text})
			if ci.ErrorClass != "" || ci.Name != "word_count" || !strings.Contains(res.Observation.Text, words) {
				t.Fatalf("%s: %+v\n%s", tc.parser, ci, res.Observation.Text)
			}
			if len(res.ToolCalls) != 1 || res.ToolCalls[0].Function.Name != "word_count" {
				t.Errorf("parsed calls = %+v", res.ToolCalls)
			}
		})
	}
	t.Run("exit_code_and_stderr", func(t *testing.T) {
		res, ci := one(gym.Action{ToolCalls: []gym.ToolCall{call("word_count", map[string]string{"path": "missing.txt"})}})
		if ci.ErrorClass != "" || ci.ExitCode != 2 || !strings.Contains(res.Observation.Text, "Exit code: 2") ||
			!strings.Contains(res.Observation.Text, "stderr:\nword_count: missing.txt: No such file or directory") {
			t.Fatalf("missing file: %+v\n%s", ci, res.Observation.Text)
		}
	})
	for _, tc := range []struct{ name, args, want string }{
		{"wrong_type", `{"path": 3}`, `word_count: argument "path" must be a string, got a number`},
		{"missing", `{}`, `word_count: missing required argument "path"`},
		{"unknown", `{"path": "poem.txt", "lines": true}`, `word_count: unknown argument "lines"; the tool takes only "path"`},
		{"not_json", `{"path": `, `word_count: arguments are not a valid JSON object`},
	} {
		t.Run("bad_arguments/"+tc.name, func(t *testing.T) {
			res, ci := one(gym.Action{ToolCalls: []gym.ToolCall{gym.NewToolCall("", "word_count", tc.args)}})
			if ci.ErrorClass != gym.ClassAgent || !strings.Contains(ci.Error, tc.want) || !strings.HasPrefix(res.Observation.Text, "Error: ") {
				t.Fatalf("%s: %+v\n%s", tc.args, ci, res.Observation.Text)
			}
		})
	}
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		res, ci := one(gym.Action{ToolCalls: []gym.ToolCall{call("wait", map[string]float64{"seconds": 30})}})
		if ci.ErrorClass != gym.ClassToolTimeout || !strings.HasPrefix(res.Observation.Text, "Timed out after 1s") ||
			!strings.Contains(res.Observation.Text, "waiting 30s") {
			t.Fatalf("wait 30s with a 1s timeout: %+v\n%s", ci, res.Observation.Text)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("the timed-out call took %s", d)
		}
		if res2, ci := one(gym.Action{ToolCalls: []gym.ToolCall{call("wait", map[string]float64{"seconds": 0.1})}}); ci.ErrorClass != "" || !strings.Contains(res2.Observation.Text, "done") {
			t.Errorf("wait 0.1s: %+v\n%s", ci, res2.Observation.Text)
		}
	})
	t.Run("output_cap", func(t *testing.T) {
		big := strings.Repeat("a", 100_000)
		res, ci := one(gym.Action{ToolCalls: []gym.ToolCall{call("echo_args", map[string]string{"text": big})}})
		if ci.ErrorClass != "" || ci.OutputDropped == 0 || !strings.Contains(res.Observation.Text, "bytes omitted") || len(res.Observation.Text) > 40_000 {
			t.Fatalf("100 kB output: %+v, %d bytes shown", ci, len(res.Observation.Text))
		}
	})
	t.Run("hostile_arguments", func(t *testing.T) {
		want, _ := json.Marshal(map[string]string{"text": hostile})
		res, ci := one(gym.Action{ToolCalls: []gym.ToolCall{call("echo_args", map[string]string{"text": hostile})}})
		if ci.ErrorClass != "" || ci.ExitCode != 0 || !strings.HasSuffix(res.Observation.Text, "stdout:\n"+string(want)) {
			t.Fatalf("echo_args: %+v\n%s", ci, res.Observation.Text)
		}
		_, ci = one(gym.Action{ToolCalls: []gym.ToolCall{call("word_count", map[string]string{"path": hostile})}})
		if ci.ExitCode != 2 {
			t.Fatalf("word_count of a hostile path: %+v", ci)
		}
		_, ci = one(gym.Action{Parser: "react", Text: "Action: echo_args\nAction Input: " + string(want)})
		if ci.ErrorClass != "" || ci.ExitCode != 0 {
			t.Fatalf("echo_args parsed: %+v", ci)
		}
		res, _ = one(gym.Action{ToolCalls: []gym.ToolCall{call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "ls /tmp; cat poem.txt"})}})
		if strings.Contains(res.Observation.Text, "pwned") || !strings.Contains(res.Observation.Text, "wheel") {
			t.Fatalf("an argument was executed:\n%s", res.Observation.Text)
		}
	})
	t.Run("agent_user", func(t *testing.T) {
		res, ci := one(gym.Action{ToolCalls: []gym.ToolCall{call("sandbox_user", map[string]string{})}})
		res2, _ := one(gym.Action{ToolCalls: []gym.ToolCall{call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "id -u"})}})
		if ci.ErrorClass != "" || res.Observation.Text != res2.Observation.Text || strings.Contains(res.Observation.Text, "stdout:\n0\n") {
			t.Fatalf("tool uid:\n%s\nexecute_command uid:\n%s", res.Observation.Text, res2.Observation.Text)
		}
	})
	// The calls were the agent's work: the episode is scored as usual.
	res := step(t, s, call(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: "count.txt", Content: "11\n"}), call(gym.ToolMarkDone, gym.MarkDoneArgs{}))
	if !res.Terminated || res.Reward != 1 || res.Info.Actions != actions+2 {
		t.Fatalf("end: reward %v, actions %d (want %d), %+v", res.Reward, res.Info.Actions, actions+2, res.Info.Evaluation)
	}
}

// TestCustomToolsActionCap: custom tool calls count toward max_actions
// like any other; the task's own tool (shout) is offered to it alone.
func TestCustomToolsActionCap(t *testing.T) {
	e := customToolsEnv(t, testProvider(t))
	s, r := resetToolTask(t, e, "capped")
	names := toolNamesOf(r.Tools)
	if !slices.Contains(names, "shout") || !slices.Contains(names, "word_count") || slices.Contains(toolNamesOf(e.Spec().Tools), "shout") {
		t.Fatalf("reset tools %v; environment tools %v", names, toolNamesOf(e.Spec().Tools))
	}
	if r.Limits.MaxActions != 3 {
		t.Fatalf("limits = %+v", r.Limits)
	}
	res := step(t, s, call("shout", map[string]string{"text": "so much depends"}), call("word_count", map[string]string{"path": "poem.txt"}))
	if !strings.Contains(res.Observation.Text, "SO MUCH DEPENDS") || res.Info.Actions != 2 || res.Done() {
		t.Fatalf("two calls: actions %d, done %v\n%s", res.Info.Actions, res.Done(), res.Observation.Text)
	}
	res = step(t, s, call("word_count", map[string]string{"path": "poem.txt"}), call("shout", map[string]string{"text": "late"}))
	if !res.Truncated || res.Info.TerminationReason != gym.ReasonMaxActions || res.Info.Actions != 3 || res.Info.Evaluation == nil || res.Reward != 0 {
		t.Fatalf("third call: truncated %v reason %s actions %d evaluation %+v", res.Truncated, res.Info.TerminationReason, res.Info.Actions, res.Info.Evaluation)
	}
	if ci := res.Info.Calls[1]; ci.ErrorClass != gym.ClassEpisodeDone || strings.Contains(res.Observation.Text, "LATE") {
		t.Errorf("call after the cap: %+v\n%s", ci, res.Observation.Text)
	}
}

// TestFakeCustomToolRequest checks the exact request a custom tool call
// makes: the tool's argv untouched, the checked arguments on stdin, the
// working directory, and the shorter of the tool's and the command timeout.
func TestFakeCustomToolRequest(t *testing.T) {
	p := sandboxtest.NewFakeProvider()
	var execs []sandbox.ExecRequest // steps run one at a time
	p.ExecFunc = func(ctx context.Context, sb *sandboxtest.FakeSandbox, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
		execs = append(execs, req)
		return sandbox.ExecResult{Stdout: []byte("ok\n")}, nil
	}
	e := customToolsEnv(t, p)
	s, _, err := e.Reset(t.Context(), gym.ResetRequest{Task: "count"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	hostileJSON := mustJSON(t, hostile)
	step(t, s,
		gym.NewToolCall("a", "word_count", "{ \"path\" :\n "+string(hostileJSON)+" }"),
		gym.NewToolCall("b", "echo_args", `{"text": "$(id)"}`),
		gym.NewToolCall("c", "sandbox_user", ``),
	)
	want := []sandbox.ExecRequest{
		{Argv: []string{"python3", "/opt/tools/word_count.py"}, Dir: "/workspace", Timeout: 20 * time.Second, MaxOutput: config.DefaultMaxOutput, Stdin: []byte(`{"path":` + string(hostileJSON) + `}`)},
		{Argv: []string{"/bin/sh", "-c", "cat; echo"}, Dir: "/workspace", Timeout: 20 * time.Second, MaxOutput: config.DefaultMaxOutput, Stdin: []byte(`{"text":"$(id)"}`)},
		{Argv: []string{"id", "-u"}, Dir: "/workspace", Timeout: 20 * time.Second, MaxOutput: config.DefaultMaxOutput, Stdin: []byte(`{}`)},
	}
	if diff := cmp.Diff(want, execs); diff != "" {
		t.Errorf("exec requests (-want +got):\n%s", diff)
	}
}

// TestRegisteredToolErrors: a tool registered in code is checked like one
// in a config.
func TestRegisteredToolErrors(t *testing.T) {
	cfg, err := config.Load(customToolsConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tool config.Tool
		want string
	}{
		{"standard_name", config.Tool{Name: "read_file", Description: "x", Command: []string{"true"}}, `tool "read_file": name: "read_file" is a standard tool`},
		{"config_name", config.Tool{Name: "word_count", Description: "x", Command: []string{"true"}}, `tool "word_count": declared twice`},
		{"no_command", config.Tool{Name: "t", Description: "x"}, `tool "t": command: missing`},
		{"bad_schema", config.Tool{Name: "t", Description: "x", Command: []string{"true"},
			Parameters: gym.Schema{Type: "object", Properties: map[string]gym.Property{"n": {Type: "int"}}}},
			`tool "t": parameters.properties.n.type: must be one of`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := envs.New(cfg, cfg.Environments[0], envs.Options{Provider: sandboxtest.NewFakeProvider(), Tools: []config.Tool{tc.tool}})
			if err == nil || !strings.Contains(err.Error(), tc.want) || gym.ClassOf(err) != gym.ClassInvalidArgument {
				t.Fatalf("err = %v (class %s), want %q", err, gym.ClassOf(err), tc.want)
			}
		})
	}
}

// mustJSON encodes v as JSON without escaping <, > and &, as a model
// would write it.
func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return []byte(strings.TrimSuffix(b.String(), "\n"))
}
