package envs

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// Options configure the environments made from a config.
type Options struct {
	// Provider makes the sandboxes. Required.
	Provider sandbox.Provider
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Tools are custom tools registered in code: every environment made
	// with these options offers them, after the tools of its config, in
	// every task. Each must pass config.Tool.Validate and take a name no
	// other tool of the environment or its tasks has.
	Tools []config.Tool
	// SnapshotArchiveMax is the largest archive a snapshot keeps of what
	// the agent can write (0: DefaultSnapshotArchiveMax); past it, or when
	// the sandbox cannot make one, the snapshot commits the sandbox to an
	// image. Negative: always commit.
	SnapshotArchiveMax int64
}

// NewRegistry returns a registry with one TaskEnv per environment of cfg.
// It reads the copied and hidden files but starts nothing.
func NewRegistry(ctx context.Context, cfg *config.Config, opts Options) (*gym.Registry, error) {
	if opts.Provider == nil {
		return nil, fmt.Errorf("envs: no sandbox provider: %w", gym.ErrInvalidArgument)
	}
	var list []gym.Env
	for _, ec := range cfg.Environments {
		e, err := New(cfg, ec, opts)
		if err != nil {
			return nil, err
		}
		list = append(list, e)
	}
	return gym.NewRegistry(list...)
}

// TaskEnv is a gym.Env for one configured environment and its tasks. It
// is safe for concurrent use.
type TaskEnv struct {
	cfg          config.Environment
	systemPrompt string
	opts         Options
	log          *slog.Logger
	// tools are the schemas of the standard tools and of the
	// environment's custom tools (its config's, then Options.Tools).
	tools []gym.Tool
	// baked are the environment's copy_folders when it has init_commands,
	// which may need them: they go into the prepared image. Without init
	// commands they are starter files of every task, like the tasks' own,
	// so that the tasks of one image share it.
	baked []sandbox.File
	// shared are the environment's copy_folders copied into every session.
	shared []sandbox.File
	tasks  []*task
	byID   map[string]*task

	// mu guards the fields below.
	mu sync.Mutex
	// images maps a task's base image (or Dockerfile) to its prepared
	// image, and workdirs to the working directory of its sandboxes.
	images   map[string]string
	workdirs map[string]string
	// snapshots maps snapshot ids to their images and states.
	snapshots map[string]snapshotRecord
}

var (
	_ gym.Env        = (*TaskEnv)(nil)
	_ gym.Forker     = (*TaskEnv)(nil)
	_ gym.TaskLister = (*TaskEnv)(nil)
)

// task is one task of a TaskEnv. Its files are read from the host on its
// first use and kept.
type task struct {
	env *TaskEnv
	// cfg is the environment's configuration with the task's values.
	cfg config.Environment
	src config.Task
	log *slog.Logger
	// tools are the schemas the agent sees: the standard tools, then the
	// task's custom tools; custom maps a custom tool's name to it.
	tools  []gym.Tool
	custom map[string]config.Tool

	once sync.Once
	err  error
	// prepared is set, under the environment's mu, once cfg has the
	// working directory of the task's image.
	prepared bool
	// starter are the task's files written into the sandbox at reset.
	starter []sandbox.File
	// hidden are the hidden test files, copied in only for evaluation.
	hidden []sandbox.File
	// hiddenRoots are the destinations of the hidden tests, removed
	// before the hidden files are copied in so nothing the agent left
	// there counts.
	hiddenRoots []string
	// preload are the modules the hidden tests import, for the verifier
	// zygote to import ahead of them (see testImports).
	preload []string
}

// New returns the TaskEnv for ec, one environment of cfg. It reads the
// environment's own copy_folders; the tasks' files are read on first use.
func New(cfg *config.Config, ec config.Environment, opts Options) (*TaskEnv, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &TaskEnv{
		cfg:          ec,
		systemPrompt: cfg.TemplatePrompt,
		opts:         opts,
		log:          log.With("env", ec.ID),
		byID:         map[string]*task{},
	}
	for _, t := range opts.Tools {
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("environment %s: %w", ec.ID, err)
		}
	}
	var err error
	if e.tools, _, err = toolSet(ec.Tools, opts.Tools); err != nil {
		return nil, fmt.Errorf("environment %s: %w", ec.ID, err)
	}
	for _, c := range ec.CopyFolders {
		files, err := c.Files()
		if err != nil {
			return nil, fmt.Errorf("environment %s: copy_folders %s: %w", ec.ID, c.Src, err)
		}
		if len(ec.InitCommands) > 0 {
			e.baked = append(e.baked, files...)
		} else {
			e.shared = append(e.shared, files...)
		}
	}
	tasks := ec.Tasks
	if len(tasks) == 0 || (len(tasks) == 1 && tasks[0].Own) {
		// The environment's own task follows its fields as they are now,
		// also when a caller changed them after loading.
		tasks = []config.Task{config.OwnTask(ec)}
	}
	for _, tc := range tasks {
		if _, dup := e.byID[tc.ID]; dup {
			return nil, fmt.Errorf("environment %s: duplicate task %q: %w", ec.ID, tc.ID, gym.ErrInvalidArgument)
		}
		t := &task{env: e, cfg: taskConfig(ec, tc), src: tc, log: e.log.With("task", tc.ID)}
		if t.tools, t.custom, err = toolSet(tc.Tools, opts.Tools); err != nil {
			return nil, fmt.Errorf("environment %s: task %s: %w", ec.ID, tc.ID, err)
		}
		e.tasks = append(e.tasks, t)
		e.byID[tc.ID] = t
	}
	if len(e.tasks) == 1 {
		// One task: read its files now, so a config mistake shows at
		// start, as it always has.
		if err := e.tasks[0].load(); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// toolSet returns the schemas of the standard tools followed by the custom
// tools of the config and of code, and the custom tools by name. A name
// taken twice is an ErrInvalidArgument.
func toolSet(fromConfig, fromCode []config.Tool) ([]gym.Tool, map[string]config.Tool, error) {
	tools := gym.StandardTools()
	custom := map[string]config.Tool{}
	for _, t := range slices.Concat(fromConfig, fromCode) {
		if gym.IsStandardTool(t.Name) {
			return nil, nil, fmt.Errorf("tool %q: a standard tool has that name: %w", t.Name, gym.ErrInvalidArgument)
		}
		if _, dup := custom[t.Name]; dup {
			return nil, nil, fmt.Errorf("tool %q: declared twice (in the config and in code?): %w", t.Name, gym.ErrInvalidArgument)
		}
		custom[t.Name] = t
		tools = append(tools, t.Spec())
	}
	return tools, custom, nil
}

// taskConfig returns the environment's configuration with the task's
// values in place of the environment's.
func taskConfig(ec config.Environment, tc config.Task) config.Environment {
	c := ec
	c.Tasks = nil
	c.Prompt = tc.Prompt
	c.UnitTests = tc.UnitTests
	c.DockerImage = tc.DockerImage
	c.Timeouts = tc.Timeouts
	c.Reward = tc.Reward
	c.MaxActions = tc.MaxActions
	c.Resources = tc.Resources
	c.Network = tc.Network
	c.HiddenTests = tc.HiddenTests
	c.Reference = tc.Reference
	c.Tools = tc.Tools
	return c
}

// load reads the task's files from the host once.
func (t *task) load() error {
	t.once.Do(func() { t.err = t.read() })
	return t.err
}

func (t *task) read() error {
	id := t.env.cfg.ID + "/" + t.src.ID
	t.starter = append(t.starter, t.env.shared...)
	for _, c := range t.src.CopyFolders {
		files, err := c.Files()
		if err != nil {
			return fmt.Errorf("task %s: copy_folders %s: %w", id, c.Src, err)
		}
		t.starter = append(t.starter, files...)
	}
	for _, f := range t.src.Files {
		t.starter = append(t.starter, sandbox.File{Path: f.Path, Data: []byte(f.Content), Mode: 0o644})
	}
	hiddenPaths := map[string]bool{}
	for _, c := range t.src.HiddenTests {
		files, err := c.Files()
		if err != nil {
			return fmt.Errorf("task %s: hidden_tests %s: %w", id, c.Src, err)
		}
		for _, f := range files {
			hiddenPaths[f.Path] = true
		}
		t.hidden = append(t.hidden, files...)
	}
	for _, f := range t.src.HiddenFiles {
		hiddenPaths[f.Path] = true
		t.hidden = append(t.hidden, sandbox.File{Path: f.Path, Data: []byte(f.Content), Mode: 0o644})
	}
	t.hiddenRoots = t.src.HiddenRoots()
	t.preload = testImports(t.hidden)
	for _, f := range append(append([]sandbox.File(nil), t.env.baked...), t.starter...) {
		if hiddenPaths[f.Path] || underAny(f.Path, t.hiddenRoots) {
			return fmt.Errorf("task %s: a starter file would be placed at %s, where hidden tests go; the agent would see them: %w",
				id, f.Path, gym.ErrInvalidArgument)
		}
	}
	return nil
}

// underAny reports whether path is inside one of roots.
func underAny(path string, roots []string) bool {
	for _, r := range roots {
		if path == r || strings.HasPrefix(path, strings.TrimSuffix(r, "/")+"/") {
			return true
		}
	}
	return false
}

// Config returns the environment's configuration.
func (e *TaskEnv) Config() config.Environment { return e.cfg }

// maxSpecTasks is the most tasks Spec describes; Tasks pages through the
// rest.
const maxSpecTasks = 100

// SandboxProvider returns the provider that makes the environment's
// sandboxes (Options.Provider).
func (e *TaskEnv) SandboxProvider() sandbox.Provider { return e.opts.Provider }

// Spec describes the environment and its first tasks; TaskCount says how
// many there are, and Tasks lists them page by page.
func (e *TaskEnv) Spec() gym.EnvSpec {
	tasks, total := e.Tasks(0, maxSpecTasks)
	return gym.EnvSpec{
		ID:          e.cfg.ID,
		Description: e.cfg.Description,
		Tasks:       tasks,
		TaskCount:   total,
		Tools:       e.tools,
	}
}

// Tasks returns up to limit tasks from offset, in declaration order, and
// the number of tasks.
func (e *TaskEnv) Tasks(offset, limit int) ([]gym.TaskSpec, int) {
	n := len(e.tasks)
	offset = min(max(offset, 0), n)
	end := n
	if limit >= 0 && offset+limit < n {
		end = offset + limit
	}
	out := make([]gym.TaskSpec, 0, end-offset)
	for _, t := range e.tasks[offset:end] {
		out = append(out, t.spec())
	}
	return out, n
}

func (t *task) spec() gym.TaskSpec {
	return gym.TaskSpec{
		ID:           t.src.ID,
		Prompt:       t.src.Prompt,
		TestCommands: len(t.src.UnitTests),
		HasReference: t.src.Reference != nil,
		Metadata:     t.src.Metadata,
	}
}

// Prepare builds the image of the environment's first task (base image,
// the environment's baked files, init commands) or finds it in the
// provider's cache, and returns its reference.
func (e *TaskEnv) Prepare(ctx context.Context) (string, error) {
	return e.tasks[0].prepare(ctx)
}

// prepare returns the prepared image of the task's base image, shared by
// every task of the environment with the same base image.
//
// A Harbor task's image is its docker_image or its Dockerfile built, and
// its sandboxes work in the image's working directory, which becomes the
// agent's.
func (t *task) prepare(ctx context.Context) (string, error) {
	e := t.env
	key := t.cfg.DockerImage
	h := t.src.HarborTask
	if h != nil && key == "" {
		key = "build:" + h.Dockerfile
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ref := e.images[key]
	if ref == "" {
		base, workdir, err := t.base(ctx)
		if err != nil {
			return "", err
		}
		ref, err = e.opts.Provider.Prepare(ctx, sandbox.ImageSpec{
			BaseImage:    base,
			WorkDir:      workdir,
			Files:        e.baked,
			InitCommands: e.cfg.InitCommands,
			Env:          e.cfg.EnvironmentVariables,
			OwnWorkDir:   h != nil,
		})
		if err != nil {
			return "", fmt.Errorf("environment %s: task %s: prepare image from %s: %w", e.cfg.ID, t.src.ID, base, err)
		}
		if e.images == nil {
			e.images, e.workdirs = map[string]string{}, map[string]string{}
		}
		e.images[key], e.workdirs[key] = ref, workdir
	}
	if !t.prepared {
		t.cfg.WorkingDirectory = e.workdirs[key]
		t.prepared = true
	}
	return ref, nil
}

// base returns the image the task's prepared image starts from and the
// working directory of its sandboxes.
func (t *task) base(ctx context.Context) (string, string, error) {
	workdir := t.env.cfg.WorkingDirectory
	if t.src.HarborTask == nil {
		return t.cfg.DockerImage, workdir, nil
	}
	base, err := t.harborBase(ctx)
	if err != nil {
		return "", "", fmt.Errorf("environment %s: task %s: %w", t.env.cfg.ID, t.src.ID, err)
	}
	if in, ok := t.env.opts.Provider.(sandbox.ImageInspector); ok {
		wd, err := in.ImageWorkDir(ctx, base)
		if err != nil {
			return "", "", fmt.Errorf("environment %s: task %s: image %s: %w", t.env.cfg.ID, t.src.ID, base, err)
		}
		if wd != "" && wd != "/" {
			workdir = path.Clean(wd)
		}
	}
	return base, workdir, nil
}

// pick returns the task a reset asks for: the named one; else, with a
// seed, the same task for the same seed; else one at random.
func (e *TaskEnv) pick(req gym.ResetRequest) (*task, error) {
	if req.Task != "" {
		t, ok := e.byID[req.Task]
		if !ok {
			return nil, fmt.Errorf("environment %s: task %q: %w", e.cfg.ID, req.Task, gym.ErrNotFound)
		}
		return t, nil
	}
	if len(e.tasks) == 1 {
		return e.tasks[0], nil
	}
	if req.Seed != nil {
		return e.tasks[SeedIndex(*req.Seed, len(e.tasks))], nil
	}
	return e.tasks[mrand.IntN(len(e.tasks))], nil
}

// SeedIndex maps a reset seed to a task index in [0, n): the first output
// of SplitMix64 seeded with seed, modulo n. The same seed picks the same
// task of a dataset of the same size on every platform and release, and a
// client can compute it too (PROTOCOL.md).
func SeedIndex(seed int64, n int) int {
	z := uint64(seed) + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return int(z % uint64(n))
}

// Reset starts a new episode of the task the request picks in a fresh
// sandbox.
func (e *TaskEnv) Reset(ctx context.Context, req gym.ResetRequest) (gym.Session, gym.Reset, error) {
	extraEnv, err := resetEnvOption(e.cfg.ID, req.Options)
	if err != nil {
		return nil, gym.Reset{}, err
	}
	t, err := e.pick(req)
	if err != nil {
		return nil, gym.Reset{}, err
	}
	if err := t.load(); err != nil {
		return nil, gym.Reset{}, gym.Classify(err, gym.ClassSandbox)
	}
	image, err := t.prepare(ctx)
	if err != nil {
		return nil, gym.Reset{}, gym.Classify(err, gym.ClassSandbox)
	}
	s, err := t.start(ctx, image, t.starter, extraEnv)
	if err != nil {
		return nil, gym.Reset{}, err
	}
	t.startZygote(ctx, s.sb)
	return s, s.initial(), nil
}

// resetEnvOption checks a reset's options and returns the variables of
// gym.OptionEnvironmentVariables, the only reset option TaskEnv takes.
func resetEnvOption(env string, opts map[string]any) (map[string]string, error) {
	var unknown []string
	for k := range opts {
		if k != gym.OptionEnvironmentVariables {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		// Named, sorted, so the message is the same every time (PROTOCOL.md §4.3).
		slices.Sort(unknown)
		return nil, fmt.Errorf("environment %s: options are not supported (got %s; the only option is %s): %w",
			env, strings.Join(unknown, ", "), gym.OptionEnvironmentVariables, gym.ErrInvalidArgument)
	}
	var out map[string]string
	for k, v := range opts {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("environment %s: option %s: want an object of strings: %w", env, k, gym.ErrInvalidArgument)
		}
		out = make(map[string]string, len(m))
		for name, val := range m {
			str, ok := val.(string)
			if !ok || name == "" || strings.ContainsAny(name, "=\x00") {
				return nil, fmt.Errorf("environment %s: option %s: %q: want a variable name and a string value: %w", env, k, name, gym.ErrInvalidArgument)
			}
			out[name] = str
		}
	}
	return out, nil
}

// start makes a session of the task in a new sandbox from image with the
// given starter files (retrying failed starts max_retries times); its
// clock starts now.
func (t *task) start(ctx context.Context, image string, files []sandbox.File, extraEnv map[string]string) (*session, error) {
	e := t.env
	env := e.cfg.EnvironmentVariables
	if len(extraEnv) > 0 {
		env = maps.Clone(env)
		if env == nil {
			env = map[string]string{}
		}
		maps.Copy(env, extraEnv)
	}
	spec := sandbox.Spec{
		Image:   image,
		WorkDir: t.cfg.WorkingDirectory,
		Env:     env,
		Labels: map[string]string{
			sandbox.LabelTask: e.cfg.ID + "/" + t.src.ID,
		},
		Resources: sandbox.Resources{
			MemoryBytes: t.cfg.Resources.MemoryBytes,
			CPUs:        t.cfg.Resources.CPUs,
			PIDs:        t.cfg.Resources.PIDs,
			DiskBytes:   t.cfg.Resources.DiskBytes,
		},
		Network:  t.cfg.Network,
		Files:    files,
		ShareUsr: t.cfg.SharedUsrOn() && t.src.HarborTask == nil,
	}
	var sb sandbox.Sandbox
	var err error
	for attempt := 0; ; attempt++ {
		sb, err = e.opts.Provider.Create(ctx, spec)
		if err == nil || attempt >= e.cfg.MaxRetries || ctx.Err() != nil {
			break
		}
		t.log.Warn("sandbox start failed; retrying", "attempt", attempt+1, "err", err)
	}
	if err != nil {
		return nil, gym.Classify(fmt.Errorf("environment %s: task %s: start sandbox: %w", e.cfg.ID, t.src.ID, err), gym.ClassSandbox)
	}
	// The provider mints session ids (sandbox.NewSessionID).
	id := sb.SessionID()
	s := &session{env: e, task: t, id: id, sb: sb, start: time.Now(), image: image, files: files}
	t.log.Info("session started", "session_id", id, "sandbox", shortID(sb.ID()))
	return s, nil
}

// startZygote starts the sandbox's verifier zygote, without waiting for
// it, when the task's evaluation can use it: the option is on and a test
// command runs pytest. It is an optimisation: a sandbox that cannot keep
// one evaluates the usual way, so failures are only logged.
func (t *task) startZygote(ctx context.Context, sb sandbox.Sandbox) {
	zs, ok := sb.(sandbox.ZygoteStarter)
	if !ok || !t.useZygote() {
		return
	}
	st, err := zs.StartZygote(ctx, sandbox.ZygoteOptions{Preload: t.preload})
	switch {
	case err != nil:
		t.log.Warn("verifier zygote did not start", "sandbox", shortID(sb.ID()), "err", err)
	case st.Error != "":
		t.log.Debug("no verifier zygote", "sandbox", shortID(sb.ID()), "reason", st.Error)
	}
}

// useZygote reports whether the task's test commands may run through the
// verifier zygote.
func (t *task) useZygote() bool {
	if t.src.HarborTask != nil || !t.cfg.ZygoteOn() {
		return false
	}
	for _, cmd := range t.cfg.UnitTests {
		if strings.Contains(cmd, "pytest") {
			return true
		}
	}
	return false
}

// limits returns the episode limits of the task.
func (t *task) limits() gym.EpisodeLimits {
	return gym.EpisodeLimits{
		MaxActions:     t.cfg.MaxActions,
		GlobalTimeout:  gym.Duration(t.cfg.Timeouts.Global),
		CommandTimeout: gym.Duration(t.cfg.Timeouts.Command),
	}
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
