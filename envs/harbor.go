package envs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/harbor"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/envs/testresult"
	"github.com/gymserver/gymserver/gym"
)

// Where a Harbor task's verifier finds its files and leaves its verdict,
// inside the sandbox.
const (
	harborTestsDir    = config.HarborTestsDir
	harborVerifierDir = "/logs/verifier"
	harborTestScript  = harborTestsDir + "/test.sh"
	// harborRewardLimit bounds each reward or report file read back.
	harborRewardLimit = 1 << 20
)

// harborReports are the per-test reports a Harbor verifier may leave, by
// parser.
var harborReports = []struct {
	name  string
	parse func([]byte) ([]gym.TestCase, error)
}{
	{"junit.xml", testresult.ParseJUnit},
	{"ctrf.json", testresult.ParseCTRF},
}

// harborBase returns the image a Harbor task's sandbox starts from: its
// docker_image, else its Dockerfile built by the provider.
func (t *task) harborBase(ctx context.Context) (string, error) {
	h := t.src.HarborTask
	if t.cfg.DockerImage != "" {
		return t.cfg.DockerImage, nil
	}
	b, ok := t.env.opts.Provider.(sandbox.Builder)
	if !ok {
		return "", fmt.Errorf("task %s: its Dockerfile cannot be built by this sandbox provider: %w", t.src.ID, gym.ErrInvalidArgument)
	}
	return b.Build(ctx, sandbox.BuildSpec{
		ContextDir: filepath.Dir(h.Dockerfile),
		Dockerfile: filepath.Base(h.Dockerfile),
		Name:       t.src.ID,
		Timeout:    h.Config.BuildTimeout(),
	})
}

// harborRoot says whether the verifier runs as root: only when the
// task's [verifier] user asks for it. Otherwise it runs as the agent's
// user, whose every process is killed before the reward is read.
func harborRoot(h *harbor.Task) bool {
	u := strings.TrimSpace(string(h.Config.Verifier.User))
	return u == "root" || u == "0"
}

// evaluateHarbor runs a Harbor task's verifier: the agent's processes are
// killed, tests/ is installed at /tests and a fresh /logs/verifier made
// (whatever the agent left at either goes), tests/test.sh runs, every
// process it left is killed, and the reward is read from reward.json or
// reward.txt. A JUnit or CTRF report, when the tests leave one, gives the
// per-test results.
func (t *task) evaluateHarbor(ctx context.Context, sb sandbox.Sandbox) (gym.Evaluation, error) {
	start := time.Now()
	h := t.src.HarborTask
	ev := gym.Evaluation{Mode: "harbor", Tests: []gym.TestCase{}, Commands: []gym.TestCommand{}}
	fail := func(class gym.ErrorClass, mask bool, err error) (gym.Evaluation, error) {
		if ctx.Err() != nil {
			return gym.Evaluation{}, ctx.Err()
		}
		ev.Reward, ev.Success = 0, false
		ev.ErrorClass, ev.Error, ev.Mask = class, err.Error(), mask
		ev.Duration = gym.Duration(time.Since(start))
		return ev, nil
	}
	if err := sb.KillAll(ctx); err != nil {
		return fail(gym.ClassSandbox, true, fmt.Errorf("stop agent processes: %w", err))
	}
	for _, p := range []string{harborTestsDir, harborVerifierDir} {
		if err := sb.Remove(ctx, p); err != nil {
			return fail(gym.ClassSandbox, true, fmt.Errorf("clear %s: %w", p, err))
		}
	}
	if err := sb.CopyIn(ctx, t.hidden); err != nil {
		return fail(gym.ClassSandbox, true, fmt.Errorf("install %s: %w", harborTestsDir, err))
	}
	root := harborRoot(h)
	if err := makeVerifierDir(ctx, sb, !root); err != nil {
		return fail(gym.ClassSandbox, true, fmt.Errorf("make %s: %w", harborVerifierDir, err))
	}

	timeout := t.cfg.Timeouts.Test
	r, err := sb.Exec(ctx, sandbox.ExecRequest{
		Argv:      []string{"bash", harborTestScript},
		Dir:       t.cfg.WorkingDirectory,
		Env:       harborEnv(h.Config.Verifier.Env),
		Timeout:   timeout,
		MaxOutput: testOutputLimit,
		Priv:      root,
	})
	if err != nil {
		return fail(gym.ClassSandbox, true, fmt.Errorf("run %s: %w", harborTestScript, err))
	}
	ev.Commands = append(ev.Commands, gym.TestCommand{
		Command:  "bash " + harborTestScript,
		ExitCode: r.ExitCode,
		Output:   formatExec(r, testOutputLimit),
		Duration: gym.Duration(r.Duration),
		TimedOut: r.TimedOut,
		Success:  r.ExitCode == 0 && !r.TimedOut,
		Source:   "reward_file",
	})
	// Nothing the tests started may write the verdict after they end.
	if err := sb.KillAll(ctx); err != nil {
		return fail(gym.ClassSandbox, true, fmt.Errorf("stop processes after the tests: %w", err))
	}
	if r.TimedOut {
		// The code under test is the agent's: a hang is its failure.
		return fail(gym.ClassVerifier, false, fmt.Errorf("%s did not finish within %s", harborTestScript, timeout))
	}

	read := func(name string) ([]byte, bool, error) {
		data, err := sb.ReadFile(ctx, path.Join(harborVerifierDir, name), harborRewardLimit)
		if sandbox.IsNotExist(err) {
			return nil, false, nil
		}
		return data, err == nil, err
	}
	txt, haveTxt, err := read(harbor.RewardTxtFile)
	if err != nil {
		return fail(gym.ClassSandbox, true, fmt.Errorf("read %s: %w", harbor.RewardTxtFile, err))
	}
	js, haveJSON, err := read(harbor.RewardJSONFile)
	if err != nil {
		return fail(gym.ClassSandbox, true, fmt.Errorf("read %s: %w", harbor.RewardJSONFile, err))
	}
	for _, rep := range harborReports {
		data, ok, err := read(rep.name)
		if err != nil || !ok {
			continue
		}
		if cases, err := rep.parse(data); err == nil {
			ev.Tests = append(ev.Tests, cases...)
			ev.Commands[0].Source = "reward_file+" + rep.name
			break
		}
	}
	ev.Passed, ev.Failed, ev.Errors, ev.Skipped = testresult.Summarize(ev.Tests)
	ev.Total = ev.Passed + ev.Failed + ev.Errors
	rw, err := harbor.ParseReward(txt, js, haveTxt, haveJSON)
	if err != nil {
		// The verifier ran on the agent's work and left no verdict: that
		// is scored, not masked, or breaking the tests would hide a
		// failure.
		return fail(gym.ClassVerifier, false, fmt.Errorf("%s: %w", harborVerifierDir, err))
	}
	ev.Metrics = rw.Metrics
	ev.RewardKey = rw.Source + ":" + rw.Key
	ev.Reward = min(max(rw.Value, 0), 1)
	threshold := t.cfg.Reward.SuccessThreshold
	if threshold <= 0 {
		threshold = 1
	}
	ev.Success = ev.Reward >= threshold-1e-9
	ev.Duration = gym.Duration(time.Since(start))
	return ev, nil
}

// harborEnv returns the verifier's environment: [verifier] env with
// ${VAR} and ${VAR:-default} resolved from the server's environment, as
// Harbor resolves them from the host.
func harborEnv(vars map[string]string) []string {
	var out []string
	for k, v := range vars {
		out = append(out, k+"="+os.Expand(v, func(name string) string {
			if n, def, ok := strings.Cut(name, ":-"); ok {
				if val := os.Getenv(n); val != "" {
					return val
				}
				return def
			}
			return os.Getenv(name)
		}))
	}
	return out
}

// makeVerifierDir makes Harbor's verifier directory for the verifier's
// user: through sandbox.DirMaker, which a recycled sandbox can undo, or
// else with commands run with the machinery's rights.
func makeVerifierDir(ctx context.Context, sb sandbox.Sandbox, forAgent bool) error {
	if m, ok := sb.(sandbox.DirMaker); ok {
		err := m.MakeDir(ctx, harborVerifierDir, forAgent)
		if !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
	}
	owner := "0:0"
	if forAgent {
		owner = "1000:1000"
	}
	for _, argv := range [][]string{{"mkdir", "-p", harborVerifierDir}, {"chown", owner, harborVerifierDir}} {
		r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: argv, Priv: true, Timeout: time.Minute, MaxOutput: 4096})
		if err != nil {
			return err
		}
		if r.ExitCode != 0 {
			return fmt.Errorf("%s exited with %d: %s", argv[0], r.ExitCode, r.Stderr)
		}
	}
	return nil
}
