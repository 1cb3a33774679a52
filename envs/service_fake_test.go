package envs_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/envs/sandbox/sandboxtest"
	"github.com/gymserver/gymserver/gym"
)

// listenTable is /proc/net/tcp with one socket listening on 127.0.0.1:8000
// (0x1F40) and one connected socket on port 9000 (0x2328, state 01).
const listenTable = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:2328 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 2 1 0000000000000000 20 4 30 10 -1
`

// servicePID is the process id the fake gives a service.
const servicePID = 4242

// fakeServiceEnv makes a fake environment with two unit_tests commands,
// hidden tests and one service "api" whose behaviour start decides: it
// runs when the evaluator starts the service.
func fakeServiceEnv(t *testing.T, service string, start func(ctx context.Context, sb *sandboxtest.FakeSandbox)) (*envs.TaskEnv, *[]sandbox.ExecRequest) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tests", "test_x.py"), []byte("def test_a(): pass\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(`{"environments": [{"id": "svc", "docker_image": "img",
		"unit_tests": ["python3 -m pytest /tests", "python3 -m pytest /tests -k b"], "prompt": "serve", "max_actions": 5,
		"hidden_tests": [{"src": "tests", "dest": "/tests"}],
		"services": [`+service+`]}]}`), dir)
	if err != nil {
		t.Fatal(err)
	}
	var seen []sandbox.ExecRequest
	p := sandboxtest.NewFakeProvider()
	p.ExecFunc = func(ctx context.Context, sb *sandboxtest.FakeSandbox, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
		seen = append(seen, req)
		if !req.Background {
			return fakePytest(ctx, sb, req)
		}
		// The hidden tests are in place, root's, before a service starts.
		if err := sb.WriteFile(ctx, "/tests/test_x.py", []byte("forged"), 0o644); err == nil {
			t.Errorf("the hidden tests were not installed before the service started")
		}
		start(ctx, sb)
		return sandbox.ExecResult{PID: servicePID, ExitCode: -1}, nil
	}
	e, err := envs.New(cfg, cfg.Environments[0], envs.Options{Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	return e, &seen
}

// TestFakeServicesStartBeforeEachTestCommand checks that the evaluator
// starts each service as the agent (never privileged), in the background,
// in the working directory, before every unit_tests command, and reports
// in the command's output whether it came up.
func TestFakeServicesStartBeforeEachTestCommand(t *testing.T) {
	for _, tc := range []struct {
		name, service string
		start         func(ctx context.Context, sb *sandboxtest.FakeSandbox)
		note          string
	}{
		{
			name:    "listening",
			service: `{"name": "api", "command": "PORT=8000 python3 app.py", "port": 8000}`,
			start: func(ctx context.Context, sb *sandboxtest.FakeSandbox) {
				_ = sb.WriteFile(ctx, "/proc/net/tcp", []byte(listenTable), 0o444)
				_ = sb.WriteFile(ctx, "/proc/4242/stat", []byte("4242 (sh) S"), 0o444)
			},
			note: "service api: listening on port 8000 after ",
		},
		{
			// Port 9000 only has a connected socket, which is not listening.
			name:    "timed_out",
			service: `{"name": "api", "command": "python3 app.py", "port": 9000, "startup_timeout": 0.2}`,
			start: func(ctx context.Context, sb *sandboxtest.FakeSandbox) {
				_ = sb.WriteFile(ctx, "/proc/net/tcp", []byte(listenTable), 0o444)
				_ = sb.WriteFile(ctx, "/proc/4242/stat", []byte("4242 (sh) S"), 0o444)
			},
			note: "service api: nothing listened on port 9000 within 200ms (startup_timeout; python3 app.py)",
		},
		{
			// No /proc/4242: the service's process is gone at once.
			name:    "exited",
			service: `{"name": "api", "command": "python3 app.py", "port": 9000, "startup_timeout": 60}`,
			start:   func(context.Context, *sandboxtest.FakeSandbox) {},
			note:    "service api: exited after ",
		},
		{
			name:    "no_port",
			service: `{"name": "api", "command": "python3 worker.py"}`,
			start:   func(context.Context, *sandboxtest.FakeSandbox) {},
			note:    "service api: started (python3 worker.py)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, seen := fakeServiceEnv(t, tc.service, tc.start)
			s, _, err := e.Reset(t.Context(), gym.ResetRequest{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			*seen = nil
			r := step(t, s, call(gym.ToolMarkDone, gym.MarkDoneArgs{}))
			ev := r.Info.Evaluation
			if ev == nil || ev.ErrorClass != "" || ev.Mask || len(ev.Commands) != 2 {
				t.Fatalf("evaluation %+v", ev)
			}
			if len(*seen) != 4 {
				t.Fatalf("commands run: %+v, want service, test, service, test", *seen)
			}
			for i, req := range *seen {
				if i%2 == 1 {
					if req.Background || !strings.Contains(req.Argv[2], "pytest") {
						t.Errorf("command %d: %+v, want a test command", i, req)
					}
					continue
				}
				if !req.Background || req.Priv || req.Report || req.Dir != "/workspace" || len(req.Argv) != 3 || req.Argv[0] != "/bin/sh" || req.Argv[1] != "-c" {
					t.Errorf("command %d: %+v, want the service in the background as the agent", i, req)
				}
			}
			for i, c := range ev.Commands {
				if !strings.HasPrefix(c.Output, tc.note) {
					t.Errorf("command %d output %q does not start with %q", i, c.Output, tc.note)
				}
			}
		})
	}
}

// TestFakeNoServicesNoBackgroundCommand checks that an environment without
// services runs nothing but its test command at evaluation.
func TestFakeNoServicesNoBackgroundCommand(t *testing.T) {
	var seen []sandbox.ExecRequest
	e, _ := fakeEnv(t, func(ctx context.Context, sb *sandboxtest.FakeSandbox, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
		seen = append(seen, req)
		return fakePytest(ctx, sb, req)
	})
	s, _, err := e.Reset(t.Context(), gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	seen = nil
	r := step(t, s, call(gym.ToolMarkDone, gym.MarkDoneArgs{}))
	if ev := r.Info.Evaluation; ev == nil || strings.Contains(ev.Commands[0].Output, "service") {
		t.Fatalf("evaluation %+v", ev)
	}
	if len(seen) != 1 || seen[0].Background {
		t.Errorf("commands run at evaluation: %+v, want the test command alone", seen)
	}
}
