package fleet_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/fleet"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/envs/sandbox/sandboxtest"
	"github.com/gymserver/gymserver/gym"
)

// mainHost is the address of the host's own engine.
func mainHost() string {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h
	}
	return client.DefaultDockerHost
}

// rig is a fleet over the host's engine ("main") and two engines the
// test starts ("a", "b"), each of capacity 2, with fast health checks.
type rig struct {
	f       *fleet.Fleet
	extra   map[string]*dockertest.Engine
	clients map[string]*client.Client
}

func newRig(t *testing.T) *rig {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Docker; skipped with -short")
	}
	a := dockertest.StartEngine(t, "a")
	b := dockertest.StartEngine(t, "b")
	f, err := fleet.New(t.Context(), fleet.Options{
		Endpoints: []fleet.Endpoint{
			{Name: "main", Host: mainHost(), Capacity: 2},
			{Name: "a", Host: a.Host(), Capacity: 2},
			{Name: "b", Host: b.Host(), Capacity: 2},
		},
		Docker: docker.Options{
			ExecutorBinary:   sandboxtest.ExecutorBinary(t),
			ImageCacheLabels: []string{dockertest.NoPruneLabel},
			// A warm pool on each engine: the pooled sandbox of a killed
			// engine must not serve a session once it is back.
			WarmPool: 1,
		},
		BuildBase: func(ctx context.Context, cli *client.Client, ref string) error {
			return baseimage.Build(ctx, cli, ref, os.Stderr)
		},
		HealthEvery:   100 * time.Millisecond,
		HealthTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{f: f, extra: map[string]*dockertest.Engine{"a": a, "b": b},
		clients: map[string]*client.Client{"a": a.Client(), "b": b.Client()}}
	main, err := client.NewClientWithOpts(client.WithHost(mainHost()), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	r.clients["main"] = main
	// Cleanups run last-in first-out: the fleet closes before the
	// engines stop, and leaves no container on any engine.
	t.Cleanup(func() {
		defer main.Close()
		if err := f.Close(context.Background()); err != nil {
			t.Errorf("close fleet: %v", err)
		}
		for name, p := range f.Providers() {
			if !r.running(name) {
				continue
			}
			if n, err := dockertest.Leftovers(context.Background(), r.clients[name], p.Owner()); err != nil || n != 0 {
				t.Errorf("engine %s: %d containers left (%v)", name, n, err)
			}
		}
	})
	return r
}

func (r *rig) running(name string) bool {
	e, ok := r.extra[name]
	return !ok || e.Running()
}

// engineOf returns the engine whose containers include the session's.
func (r *rig) engineOf(t *testing.T, sessionID string) string {
	t.Helper()
	var found []string
	for name, cli := range r.clients {
		if !r.running(name) {
			continue
		}
		list, err := cli.ContainerList(t.Context(), container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+sessionID))})
		if err != nil {
			t.Fatalf("engine %s: list: %v", name, err)
		}
		if len(list) > 0 {
			found = append(found, name)
		}
	}
	if len(found) != 1 {
		t.Fatalf("session %s is on engines %v, want exactly one", sessionID, found)
	}
	return found[0]
}

// info returns the fleet's view of an engine.
func (r *rig) info(t *testing.T, name string) fleet.EngineInfo {
	t.Helper()
	for _, e := range r.f.Engines() {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("no engine %s", name)
	return fleet.EngineInfo{}
}

// waitUp waits until the fleet sees the engine up (or down).
func (r *rig) waitUp(t *testing.T, name string, up bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for r.info(t, name).Up != up {
		if time.Now().After(deadline) {
			t.Fatalf("engine %s: up is not %v after 30s", name, up)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func loadEnv(t *testing.T, p sandbox.Provider) *envs.TaskEnv {
	t.Helper()
	cfg, err := config.Load(filepath.Join("..", "..", "examples", "fix_inventory", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Snapshots commit images, which only their engine holds.
	e, err := envs.New(cfg, cfg.Environments[0], envs.Options{Provider: p, SnapshotArchiveMax: -1})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func reset(t *testing.T, e *envs.TaskEnv) gym.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	s, _, err := e.Reset(ctx, gym.ResetRequest{})
	if err != nil {
		t.Fatalf("reset: %v", err)
	}
	return s
}

func echo(t *testing.T, s gym.Session, word string) {
	t.Helper()
	b, _ := json.Marshal(gym.ExecuteCommandArgs{Command: "echo " + word})
	r, err := s.Step(t.Context(), gym.Action{ToolCalls: []gym.ToolCall{gym.NewToolCall("", gym.ToolExecuteCommand, string(b))}})
	if err != nil {
		t.Fatalf("step: %v", err)
	}
	if !strings.Contains(r.Observation.Text, word) {
		t.Fatalf("step: %q, want %q", r.Observation.Text, word)
	}
}

func closeSession(t *testing.T, s gym.Session) {
	t.Helper()
	if _, err := s.Close(t.Context()); err != nil {
		t.Errorf("close session %s: %v", s.ID(), err)
	}
}

// TestFleetAcrossEngines runs episodes over three real engines: placement
// spreads them, images reach each engine once, a committed snapshot and
// its fork stay on their engine, a killed engine's session ends as a
// masked sandbox_error while new resets go to the others, and the engine
// takes sessions again once it is back.
func TestFleetAcrossEngines(t *testing.T) {
	r := newRig(t)
	e := loadEnv(t, r.f)

	// Spread: three resets, one per engine (each at 0/2, then the first
	// listed of those least loaded).
	start := time.Now()
	s1 := reset(t, e)
	first := time.Since(start)
	s2, s3 := reset(t, e), reset(t, e)
	took := time.Since(start)
	on := map[string]gym.Session{}
	for _, s := range []gym.Session{s1, s2, s3} {
		on[r.engineOf(t, s.ID())] = s
		echo(t, s, "hi-"+s.ID())
	}
	if len(on) != 3 || r.engineOf(t, s1.ID()) != "main" {
		t.Fatalf("three sessions on engines %v, want main, a and b in that order", on)
	}
	for _, name := range []string{"a", "b"} {
		in := r.info(t, name)
		if in.Transfers != 1 || in.Sessions != 1 {
			t.Fatalf("engine %s: %+v, want 1 image transfer and 1 session", name, in)
		}
		t.Logf("engine %s: image transfer %d bytes in %.1fs", name, in.TransferBytes, in.TransferSeconds)
	}
	t.Logf("first reset (main engine) %.2fs; three resets with two image transfers %.1fs", first.Seconds(), took.Seconds())
	// Each engine has a pool of its own for the spec, which counted that
	// engine's one reset.
	pools := r.f.PoolStats().Pools
	if len(pools) != 3 {
		t.Fatalf("pools %+v, want one on each engine", pools)
	}
	for i, name := range []string{"main", "a", "b"} {
		if p := pools[i]; p.Engine != name || p.Target != 1 || p.Cold+p.FromPool != 1 || !slices.Equal(p.Envs, []string{e.Config().ID}) {
			t.Errorf("pool %d: %+v, want engine %s's, of target 1, one reset of %s", i, p, name, e.Config().ID)
		}
	}

	// A sandbox of the fleet keeps a verifier zygote, as its engine's
	// would, and a test command runs through it.
	checkZygote(t, r.f)

	// A committed snapshot of the session on a, forked: the fork is on a
	// even though a is not the least loaded engine now (main 1, a 1, b 1:
	// the first listed would be main).
	snap, err := on["a"].(gym.Snapshotter).Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if snap.Mode != gym.SnapshotCommit {
		t.Fatalf("snapshot mode %s, want commit", snap.Mode)
	}
	fork, _, err := e.Fork(t.Context(), snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.engineOf(t, fork.ID()); got != "a" {
		t.Fatalf("fork on engine %s, want a (the snapshot's)", got)
	}
	echo(t, fork, "forked")
	closeSession(t, fork)

	// Kill engine a: the fleet marks it down; its session's next step
	// ends the episode as a masked sandbox_error.
	r.extra["a"].Kill()
	r.waitUp(t, "a", false)
	b, _ := json.Marshal(gym.ExecuteCommandArgs{Command: "echo after"})
	res, err := on["a"].Step(t.Context(), gym.Action{ToolCalls: []gym.ToolCall{gym.NewToolCall("", gym.ToolExecuteCommand, string(b))}})
	switch {
	case err != nil:
		if gym.ClassOf(err) != gym.ClassSandbox || !gym.Masked(gym.ClassOf(err)) {
			t.Fatalf("step on the dead engine: %v (class %s), want a masked sandbox_error", err, gym.ClassOf(err))
		}
	case len(res.Info.Calls) != 1 || res.Info.Calls[0].ErrorClass != gym.ClassSandbox ||
		!res.Done() || res.Info.TerminationReason != gym.ReasonSandboxError:
		t.Fatalf("step on the dead engine: %+v, want the episode ended as sandbox_error", res.Info)
	}
	// The snapshot's image is on a: its forks fail while a is down.
	if _, _, err := e.Fork(t.Context(), snap.ID); gym.ClassOf(err) != gym.ClassSandbox {
		t.Fatalf("fork while its engine is down: %v, want sandbox_error", err)
	}
	// Its container cannot be removed while a is down; the provider
	// removes it when the fleet closes.
	on["a"].Close(t.Context())
	// The others keep working, and new resets avoid a: main and b have
	// one place each left.
	echo(t, on["main"], "still")
	echo(t, on["b"], "still")
	s4, s5 := reset(t, e), reset(t, e)
	for _, s := range []gym.Session{s4, s5} {
		if got := r.engineOf(t, s.ID()); got == "a" {
			t.Fatalf("reset placed on the dead engine")
		}
		echo(t, s, "elsewhere")
	}
	// Full: main 2/2, b 2/2, a down.
	// (The environment reports every failed start as sandbox_error.)
	if _, _, err := e.Reset(t.Context(), gym.ResetRequest{}); gym.ClassOf(err) != gym.ClassSandbox ||
		!strings.Contains(err.Error(), "every engine is at its capacity") {
		t.Fatalf("reset with every live engine full: %v, want every engine at its capacity", err)
	}

	// a comes back: it rejoins and takes the next session; the fork of
	// the snapshot works again.
	r.extra["a"].Restart()
	r.waitUp(t, "a", true)
	s6 := reset(t, e)
	if got := r.engineOf(t, s6.ID()); got != "a" {
		t.Fatalf("reset after a came back on %s, want a", got)
	}
	echo(t, s6, "back")
	closeSession(t, s4)
	fork2, _, err := e.Fork(t.Context(), snap.ID)
	if err != nil {
		t.Fatalf("fork after its engine came back: %v", err)
	}
	if got := r.engineOf(t, fork2.ID()); got != "a" {
		t.Fatalf("fork on engine %s, want a", got)
	}
	echo(t, fork2, "forked-again")
	if in := r.info(t, "a"); in.Downs != 1 || !in.Up {
		t.Fatalf("engine a: %+v, want up after one down", in)
	}
	for _, s := range []gym.Session{s1, s2, s3, s5, s6, fork2} {
		if s != on["a"] {
			closeSession(t, s)
		}
	}
	if err := e.DropSnapshot(t.Context(), snap.ID); err != nil {
		t.Fatal(err)
	}
	if n := r.f.Live(); n != 0 {
		t.Fatalf("%d live sandboxes after every session closed", n)
	}
}

// TestStartOnDeadEngineGoesElsewhere kills an engine between health
// checks (there are none in this test): the start placed on it fails,
// the fleet finds it does not answer, marks it down and starts the
// sandbox on the other engine.
func TestStartOnDeadEngineGoesElsewhere(t *testing.T) {
	x := dockertest.StartEngine(t, "dead")
	f, err := fleet.New(t.Context(), fleet.Options{
		Endpoints: []fleet.Endpoint{{Name: "main", Host: mainHost(), Capacity: 2}, {Name: "x", Host: x.Host(), Capacity: 2}},
		Docker: docker.Options{
			ExecutorBinary:   sandboxtest.ExecutorBinary(t),
			ImageCacheLabels: []string{dockertest.NoPruneLabel},
		},
		HealthEvery: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// x is dead (its provider's close fails; the engine's files go
		// with the test's engine cleanup); main must be left clean.
		f.Close(context.Background())
		cli, err := client.NewClientWithOpts(client.WithHost(mainHost()), client.WithAPIVersionNegotiation())
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		if n, err := dockertest.Leftovers(context.Background(), cli, f.Providers()["main"].Owner()); err != nil || n != 0 {
			t.Errorf("engine main: %d containers left (%v)", n, err)
		}
	})
	ctx := t.Context()
	img, first := prepareAndCreate(t, f, "main", "a tie goes to the first listed")
	defer first.Close(context.Background())
	// x (0/2) is now the least loaded, but dead.
	x.Kill()
	second, err := f.Create(ctx, sandbox.Spec{Image: img, WorkDir: "/workspace"})
	if err != nil {
		t.Fatalf("create with x dead: %v", err)
	}
	defer second.Close(context.Background())
	if got := fleet.EngineOf(second); got != "main" {
		t.Fatalf("second sandbox on %s, want main", got)
	}
	r, err := second.Exec(ctx, sandbox.ExecRequest{Argv: []string{"echo", "ok"}})
	if err != nil || !strings.Contains(string(r.Stdout), "ok") {
		t.Fatalf("exec: %+v %v", r, err)
	}
	for _, e := range f.Engines() {
		if e.Name == "x" && (e.Up || e.Downs != 1 || e.Sessions != 0) {
			t.Fatalf("engine x after its failed start: %+v, want down once, no session", e)
		}
	}
}

// TestEngineOverTLS puts an engine reached over TCP with TLS (client
// certificates verified) beside the host's: a sandbox placed there gets
// its image and runs a command; without the certificates the engine
// cannot be joined.
func TestEngineOverTLS(t *testing.T) {
	_, host, certs := dockertest.StartTLSEngine(t, "tls")
	if _, err := fleet.New(t.Context(), fleet.Options{
		Endpoints: []fleet.Endpoint{{Name: "tls", Host: host}},
		Docker:    docker.Options{ExecutorBinary: sandboxtest.ExecutorBinary(t)},
	}); err == nil {
		t.Fatal("joined a TLS engine without certificates")
	}
	f, err := fleet.New(t.Context(), fleet.Options{
		Endpoints: []fleet.Endpoint{{Name: "main", Host: mainHost(), Capacity: 1}, {Name: "tls", Host: host, Capacity: 1, TLSDir: certs}},
		Docker: docker.Options{
			ExecutorBinary:   sandboxtest.ExecutorBinary(t),
			ImageCacheLabels: []string{dockertest.NoPruneLabel},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	ctx := t.Context()
	img, err := f.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	var sbs []sandbox.Sandbox
	for range 2 {
		sb, err := f.Create(ctx, sandbox.Spec{Image: img, WorkDir: "/workspace"})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close(context.Background())
		sbs = append(sbs, sb)
	}
	if got := fleet.EngineOf(sbs[1]); got != "tls" {
		t.Fatalf("second sandbox on %s, want tls (main is full)", got)
	}
	r, err := sbs[1].Exec(ctx, sandbox.ExecRequest{Argv: []string{"echo", "over-tls"}})
	if err != nil || !strings.Contains(string(r.Stdout), "over-tls") {
		t.Fatalf("exec on the TLS engine: %+v %v", r, err)
	}
}

// TestEngineJoinsLate starts a fleet while one of its engines is down:
// the fleet starts on the others, the engine joins (reaped, with its own
// provider) when a health check first reaches it, and then takes
// sandboxes, which get their image there and run. A fleet none of whose
// engines answers does not start.
func TestEngineJoinsLate(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker; skipped with -short")
	}
	late := dockertest.StartEngine(t, "late")
	late.Kill()
	opts := fleet.Options{
		Endpoints: []fleet.Endpoint{{Name: "main", Host: mainHost(), Capacity: 2}, {Name: "late", Host: late.Host(), Capacity: 2}},
		Docker: docker.Options{
			ExecutorBinary:   sandboxtest.ExecutorBinary(t),
			ImageCacheLabels: []string{dockertest.NoPruneLabel},
		},
		HealthEvery:   time.Hour, // the test runs the checks
		HealthTimeout: time.Second,
	}
	ctx := t.Context()

	only := opts
	only.Endpoints = opts.Endpoints[1:]
	if f, err := fleet.New(ctx, only); err == nil {
		f.Close(context.Background())
		t.Fatal("a fleet whose only engine is down started")
	} else if !strings.Contains(err.Error(), "no engine is reachable") {
		t.Fatalf("fleet of a down engine: %v", err)
	}

	f, err := fleet.New(ctx, opts)
	if err != nil {
		t.Fatalf("fleet with one engine down: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(context.Background()); err != nil {
			t.Errorf("close fleet: %v", err)
		}
		for name, p := range f.Providers() {
			if n, err := dockertest.Leftovers(context.Background(), p.Client(), p.Owner()); err != nil || n != 0 {
				t.Errorf("engine %s: %d containers left (%v)", name, n, err)
			}
		}
	})
	info := func(name string) fleet.EngineInfo {
		for _, e := range f.Engines() {
			if e.Name == name {
				return e
			}
		}
		t.Fatalf("no engine %s", name)
		return fleet.EngineInfo{}
	}
	if e := info("late"); e.Up || e.LastError == "" {
		t.Fatalf("engine late at start: %+v, want down with its error", e)
	}
	if _, ok := f.Providers()["late"]; ok {
		t.Fatal("engine late has a provider before it joined")
	}
	img, first := prepareAndCreate(t, f, "main", "late is down")
	defer first.Close(context.Background())

	late.Restart()
	f.CheckHealth(ctx)
	if e := info("late"); !e.Up || e.Downs != 0 {
		t.Fatalf("engine late after it started: %+v, want up (never counted down)", e)
	}
	if _, ok := f.Providers()["late"]; !ok {
		t.Fatal("engine late joined without a provider")
	}
	// main holds 1 of 2, late 0 of 2: the next sandbox goes to late.
	second, err := f.Create(ctx, sandbox.Spec{Image: img, WorkDir: "/workspace"})
	if err != nil {
		t.Fatalf("create after late joined: %v", err)
	}
	defer second.Close(context.Background())
	if got := fleet.EngineOf(second); got != "late" {
		t.Fatalf("sandbox on %s, want late (least loaded once it joined)", got)
	}
	r, err := second.Exec(ctx, sandbox.ExecRequest{Argv: []string{"echo", "joined"}})
	if err != nil || !strings.Contains(string(r.Stdout), "joined") {
		t.Fatalf("exec on late: %+v %v", r, err)
	}
	if e := info("late"); e.Transfers == 0 {
		t.Fatalf("engine late: %+v, want its image copied in", e)
	}
}

// prepareAndCreate prepares the base image on the fleet and starts a
// sandbox of it, which must land on engine want (why says why).
func prepareAndCreate(t *testing.T, f *fleet.Fleet, want, why string) (string, sandbox.Sandbox) {
	t.Helper()
	img, err := f.Prepare(t.Context(), sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := f.Create(t.Context(), sandbox.Spec{Image: img, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	if got := fleet.EngineOf(sb); got != want {
		sb.Close(context.Background())
		t.Fatalf("sandbox on %s, want %s (%s)", got, want, why)
	}
	return img, sb
}

// checkZygote starts a sandbox on f, starts its verifier zygote and runs
// pytest through it.
func checkZygote(t *testing.T, f *fleet.Fleet) {
	t.Helper()
	ctx := t.Context()
	image, err := f.Prepare(ctx, sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := f.Create(ctx, sandbox.Spec{Image: image, WorkDir: "/workspace", ShareUsr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.WithoutCancel(ctx))
	z, ok := sb.(sandbox.ZygoteStarter)
	if !ok {
		t.Fatal("a fleet sandbox is not a sandbox.ZygoteStarter: evaluations would never use the verifier zygote")
	}
	st, err := z.StartZygote(ctx, sandbox.ZygoteOptions{Wait: true})
	if err != nil || !st.Ready || st.PytestVersion == "" {
		t.Fatalf("the verifier zygote of a fleet sandbox: %+v %v", st, err)
	}
	// The environment an evaluation gives a pytest command (see
	// envs.testRun.env), which the zygote's must match.
	env := []string{"PYTHONNOUSERSITE=1", "PYTHONSAFEPATH=1", "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=/tmp"}
	r, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "python3 -m pytest --version"},
		Env: env, Timeout: time.Minute, Zygote: true})
	if err != nil || r.ExitCode != 0 || !r.ViaZygote {
		t.Fatalf("pytest --version with the zygote: exit %d via zygote %v (%s) %v", r.ExitCode, r.ViaZygote, r.ZygoteMiss, err)
	}
}
