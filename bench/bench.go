// Package bench is the load generator behind "gymserver bench": it runs
// many concurrent sessions of one environment, each doing a fixed number
// of steps (a shell command or a file write per step), and measures the
// latency of every reset, step, evaluate and close, the errors by class,
// and the throughput.
//
// Run works on any gym.Env: the remote environments of the Go client (one
// per connection, so that N sessions spread over M connections) or, in
// tests, the in-memory environments of gym/gymtest.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gymserver/gymserver/gym"
)

// Op names, the keys of Report.Ops. OpResetAgain is the reset of a
// session slot's second and later episodes (Config.Episodes > 1): on a
// server with a warm pool it shows how fast the pool refills.
const (
	OpReset      = "reset"
	OpResetAgain = "reset_again"
	OpStep       = "step"
	OpEvaluate   = "evaluate"
	OpClose      = "close"
)

// opOrder is the order in which reports list the ops.
var opOrder = []string{OpReset, OpResetAgain, OpStep, OpEvaluate, OpClose}

// WriteFilePath is the file (relative to the task's working directory)
// that the steps of Config.WriteBytes write.
const WriteFilePath = "gymserver-bench.txt"

// Config is what a run does. Zero fields take the defaults of Defaults.
type Config struct {
	// Env is the environment id; Task the task id (empty: the server
	// picks one per reset).
	Env  string
	Task string
	// Sessions is the number of concurrent session slots (N).
	Sessions int
	// Episodes is the number of episodes each slot runs, one after the
	// other (default 1).
	Episodes int
	// Steps is the number of steps of each episode; an episode that ends
	// earlier (max_actions, timeout) is counted in Report.EndedEarly.
	Steps int
	// Command is the execute_command run by each step when WriteBytes is 0
	// (default "echo hi").
	Command string
	// WriteBytes > 0 makes each step a write_file of that many bytes to
	// WriteFilePath instead of a command.
	WriteBytes int
	// SkipEvaluate leaves out the evaluation (the hidden tests) at the end
	// of each episode.
	SkipEvaluate bool
}

// withDefaults returns c with its zero fields filled.
func (c Config) withDefaults() Config {
	c.Sessions = max(c.Sessions, 1)
	c.Episodes = max(c.Episodes, 1)
	c.Steps = max(c.Steps, 0)
	if c.Command == "" {
		c.Command = "echo hi"
	}
	return c
}

// Action returns the action each step sends, and a short description.
func (c Config) Action() (gym.Action, string, error) {
	c = c.withDefaults()
	var name string
	var args any
	desc := ""
	if c.WriteBytes > 0 {
		name = gym.ToolWriteFile
		args = gym.WriteFileArgs{Filepath: WriteFilePath, Content: strings.Repeat("x", c.WriteBytes)}
		desc = fmt.Sprintf("write_file %d bytes", c.WriteBytes)
	} else {
		name = gym.ToolExecuteCommand
		args = gym.ExecuteCommandArgs{Command: c.Command}
		desc = fmt.Sprintf("execute_command %q", c.Command)
	}
	b, err := json.Marshal(args)
	if err != nil {
		return gym.Action{}, "", fmt.Errorf("encode action: %w", err)
	}
	return gym.Action{ToolCalls: []gym.ToolCall{gym.NewToolCall("", name, string(b))}}, desc, nil
}

// Stats are the latencies of one op, in milliseconds. Errors counts the
// requests that failed (their latency is included: a failure is an
// answer too).
type Stats struct {
	Count  int     `json:"count"`
	Errors int     `json:"errors"`
	P50    float64 `json:"p50_ms"`
	P90    float64 `json:"p90_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
	Mean   float64 `json:"mean_ms"`
}

// Summarize returns the stats of the latencies d, of which errors failed.
// Percentiles are nearest-rank: the p-th percentile is the smallest
// latency that at least p % of the latencies do not exceed.
func Summarize(d []time.Duration, errors int) Stats {
	s := Stats{Count: len(d), Errors: errors}
	if len(d) == 0 {
		return s
	}
	d = slices.Clone(d)
	slices.Sort(d)
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	s.P50 = ms(Percentile(d, 50))
	s.P90 = ms(Percentile(d, 90))
	s.P99 = ms(Percentile(d, 99))
	s.Max = ms(d[len(d)-1])
	s.Mean = ms(sum / time.Duration(len(d)))
	return s
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted, which must be sorted ascending and not empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Report is the outcome of a run.
type Report struct {
	Env         string `json:"env"`
	Task        string `json:"task,omitempty"`
	Sessions    int    `json:"sessions"`
	Connections int    `json:"connections"`
	Servers     int    `json:"servers"`
	Episodes    int    `json:"episodes_per_session"`
	StepsWanted int    `json:"steps_per_episode"`
	Action      string `json:"action"`
	// Wall is the run's duration in seconds, from the first reset to the
	// last close.
	Wall float64 `json:"wall_seconds"`
	// StepsDone counts the steps that succeeded; StepsPerSecond is
	// StepsDone / Wall.
	StepsDone      int     `json:"steps_done"`
	StepsPerSecond float64 `json:"steps_per_second"`
	// EpisodesDone counts the episodes that reset; EndedEarly those of
	// them that ended (terminated or truncated) before their last step.
	EpisodesDone int `json:"episodes_done"`
	EndedEarly   int `json:"episodes_ended_early"`
	// Ops holds the latency stats by op (OpReset, OpStep, ...).
	Ops map[string]Stats `json:"ops"`
	// Errors counts failed requests by error class (gym.ClassOf).
	Errors map[string]int `json:"errors_by_code"`
	// CallErrors counts the failed tool calls inside answered steps by
	// class (agent_error, tool_timeout, sandbox_error, ...).
	CallErrors map[string]int `json:"call_errors_by_code"`
	// ServerCPU is the servers' CPU time over the run, when it could be
	// read (see CPUSample); nil otherwise.
	ServerCPU *CPU `json:"server_cpu,omitempty"`
}

// CPU is the CPU time the servers' processes used during a run.
type CPU struct {
	// Seconds is the sum over the servers of the increase of
	// process_cpu_seconds_total.
	Seconds float64 `json:"seconds"`
	// PerStepMillis is Seconds / StepsDone in milliseconds: the server's
	// CPU per step, resets and evaluations included.
	PerStepMillis float64 `json:"per_step_ms"`
	// Servers is the number of servers whose CPU was read.
	Servers int `json:"servers"`
}

// recorder collects latencies and errors from the session goroutines.
type recorder struct {
	mu         sync.Mutex
	lat        map[string][]time.Duration
	failed     map[string]int
	errors     map[string]int
	callErrors map[string]int
	steps      int
	episodes   int
	early      int
}

func newRecorder() *recorder {
	return &recorder{lat: map[string][]time.Duration{}, failed: map[string]int{},
		errors: map[string]int{}, callErrors: map[string]int{}}
}

// op records one request of op that took d and failed with err (or not).
func (r *recorder) op(op string, d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lat[op] = append(r.lat[op], d)
	if err != nil {
		r.failed[op]++
		class := string(gym.ClassOf(err))
		if class == "" {
			class = "unclassified"
		}
		r.errors[class]++
	}
}

// step records an answered step's tool-call errors.
func (r *recorder) step(res gym.StepResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps++
	for _, c := range res.Info.Calls {
		if c.ErrorClass != gym.ClassNone {
			r.callErrors[string(c.ErrorClass)]++
		}
	}
}

func (r *recorder) episode(early bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.episodes++
	if early {
		r.early++
	}
}

// Run runs cfg: Sessions slots at once, slot i on envs[i % len(envs)]
// (one env per connection), each running Episodes episodes of Steps
// steps, an evaluation (unless SkipEvaluate) and a close. Failed requests
// are counted, not fatal: a slot whose reset fails goes on with its next
// episode, and an episode whose step fails is evaluated and closed. Run
// returns an error only for a bad configuration or when ctx ends.
func Run(ctx context.Context, cfg Config, envs []gym.Env) (*Report, error) {
	if len(envs) == 0 {
		return nil, errors.New("bench: no environment to run")
	}
	if cfg.Env == "" {
		cfg.Env = envs[0].Spec().ID
	}
	cfg = cfg.withDefaults()
	action, desc, err := cfg.Action()
	if err != nil {
		return nil, err
	}
	rec := newRecorder()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range cfg.Sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ep := range cfg.Episodes {
				if ctx.Err() != nil {
					return
				}
				op := OpReset
				if ep > 0 {
					op = OpResetAgain
				}
				runEpisode(ctx, cfg, envs[i%len(envs)], op, action, rec)
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	rep := &Report{
		Env: cfg.Env, Task: cfg.Task, Sessions: cfg.Sessions, Connections: len(envs), Servers: 1,
		Episodes: cfg.Episodes, StepsWanted: cfg.Steps, Action: desc,
		Wall: wall.Seconds(), StepsDone: rec.steps, EpisodesDone: rec.episodes, EndedEarly: rec.early,
		Ops: map[string]Stats{}, Errors: rec.errors, CallErrors: rec.callErrors,
	}
	if wall > 0 {
		rep.StepsPerSecond = float64(rec.steps) / wall.Seconds()
	}
	for _, op := range opOrder {
		if d := rec.lat[op]; len(d) > 0 {
			rep.Ops[op] = Summarize(d, rec.failed[op])
		}
	}
	return rep, nil
}

// runEpisode runs one episode of a slot and records what it measured.
func runEpisode(ctx context.Context, cfg Config, env gym.Env, resetOp string, action gym.Action, rec *recorder) {
	t := time.Now()
	s, _, err := env.Reset(ctx, gym.ResetRequest{Task: cfg.Task})
	rec.op(resetOp, time.Since(t), err)
	if err != nil {
		return
	}
	early := false
	for k := range cfg.Steps {
		t = time.Now()
		res, err := s.Step(ctx, action)
		rec.op(OpStep, time.Since(t), err)
		if err != nil {
			break
		}
		rec.step(res)
		if res.Done() {
			early = k < cfg.Steps-1
			break
		}
	}
	rec.episode(early)
	if !cfg.SkipEvaluate {
		t = time.Now()
		_, err := s.Evaluate(ctx)
		rec.op(OpEvaluate, time.Since(t), err)
	}
	// Close even when ctx has ended, so that no sandbox is left open.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	t = time.Now()
	_, err = s.Close(cctx)
	rec.op(OpClose, time.Since(t), err)
}
