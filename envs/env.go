package envs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
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

// TaskEnv is a gym.Env for one configured environment with one task (the
// task id is the environment id). It is safe for concurrent use.
type TaskEnv struct {
	cfg          config.Environment
	systemPrompt string
	opts         Options
	log          *slog.Logger
	tools        []gym.Tool
	// starter are the copy_folders files, baked into the prepared image.
	starter []sandbox.File
	// hidden are the hidden test files, copied in only for evaluation.
	hidden []sandbox.File
	// hiddenRoots are the destinations of hidden_tests, removed before
	// the hidden files are copied in so nothing the agent left there counts.
	hiddenRoots []string

	// mu guards the fields below.
	mu    sync.Mutex
	image string
	// snapshots maps snapshot ids to their images and states.
	snapshots map[string]snapshotRecord
}

var (
	_ gym.Env    = (*TaskEnv)(nil)
	_ gym.Forker = (*TaskEnv)(nil)
)

// New returns the TaskEnv for ec, one environment of cfg.
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
		tools:        gym.StandardTools(),
	}
	for _, c := range ec.CopyFolders {
		files, err := c.Files()
		if err != nil {
			return nil, fmt.Errorf("environment %s: copy_folders %s: %w", ec.ID, c.Src, err)
		}
		e.starter = append(e.starter, files...)
	}
	hiddenPaths := map[string]bool{}
	for _, c := range ec.HiddenTests {
		files, err := c.Files()
		if err != nil {
			return nil, fmt.Errorf("environment %s: hidden_tests %s: %w", ec.ID, c.Src, err)
		}
		for _, f := range files {
			hiddenPaths[f.Path] = true
		}
		e.hidden = append(e.hidden, files...)
		e.hiddenRoots = append(e.hiddenRoots, c.Dest)
	}
	for _, f := range e.starter {
		if hiddenPaths[f.Path] || underAny(f.Path, e.hiddenRoots) {
			return nil, fmt.Errorf("environment %s: copy_folders would place %s where hidden tests go; the agent would see them: %w",
				ec.ID, f.Path, gym.ErrInvalidArgument)
		}
	}
	return e, nil
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

// Spec describes the environment.
func (e *TaskEnv) Spec() gym.EnvSpec {
	return gym.EnvSpec{
		ID:          e.cfg.ID,
		Description: e.cfg.Description,
		Tasks: []gym.TaskSpec{{
			ID:           e.cfg.ID,
			Prompt:       e.cfg.Prompt,
			TestCommands: len(e.cfg.UnitTests),
			HasReference: e.cfg.Reference != nil,
		}},
		Tools: e.tools,
	}
}

// Prepare builds the environment's image (base image, copied files, init
// commands) or finds it in the provider's cache, and returns its reference.
func (e *TaskEnv) Prepare(ctx context.Context) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.image != "" {
		return e.image, nil
	}
	ref, err := e.opts.Provider.Prepare(ctx, sandbox.ImageSpec{
		BaseImage:    e.cfg.DockerImage,
		WorkDir:      e.cfg.WorkingDirectory,
		Files:        e.starter,
		InitCommands: e.cfg.InitCommands,
		Env:          e.cfg.EnvironmentVariables,
	})
	if err != nil {
		return "", fmt.Errorf("environment %s: prepare image: %w", e.cfg.ID, err)
	}
	e.image = ref
	return ref, nil
}

// Reset starts a new episode in a fresh sandbox.
func (e *TaskEnv) Reset(ctx context.Context, req gym.ResetRequest) (gym.Session, gym.Reset, error) {
	if req.Task != "" && req.Task != e.cfg.ID {
		return nil, gym.Reset{}, fmt.Errorf("environment %s: task %q: %w", e.cfg.ID, req.Task, gym.ErrNotFound)
	}
	for k := range req.Options {
		return nil, gym.Reset{}, fmt.Errorf("environment %s: option %q is not supported: %w", e.cfg.ID, k, gym.ErrInvalidArgument)
	}
	image, err := e.Prepare(ctx)
	if err != nil {
		return nil, gym.Reset{}, gym.Classify(err, gym.ClassSandbox)
	}
	s, err := e.start(ctx, image)
	if err != nil {
		return nil, gym.Reset{}, err
	}
	return s, s.initial(), nil
}

// start makes a session in a new sandbox from image (retrying failed starts
// max_retries times); its clock starts now.
func (e *TaskEnv) start(ctx context.Context, image string) (*session, error) {
	id := newSessionID()
	spec := sandbox.Spec{
		Image:   image,
		WorkDir: e.cfg.WorkingDirectory,
		Env:     e.cfg.EnvironmentVariables,
		Labels: map[string]string{
			sandbox.LabelSession: id,
			sandbox.LabelTask:    e.cfg.ID,
		},
		Resources: sandbox.Resources{
			MemoryBytes: e.cfg.Resources.MemoryBytes,
			CPUs:        e.cfg.Resources.CPUs,
			PIDs:        e.cfg.Resources.PIDs,
			DiskBytes:   e.cfg.Resources.DiskBytes,
		},
		Network: e.cfg.Network,
	}
	var sb sandbox.Sandbox
	var err error
	for attempt := 0; ; attempt++ {
		sb, err = e.opts.Provider.Create(ctx, spec)
		if err == nil || attempt >= e.cfg.MaxRetries || ctx.Err() != nil {
			break
		}
		e.log.Warn("sandbox start failed; retrying", "session_id", id, "attempt", attempt+1, "err", err)
	}
	if err != nil {
		return nil, gym.Classify(fmt.Errorf("environment %s: session %s: start sandbox: %w", e.cfg.ID, id, err), gym.ClassSandbox)
	}
	if n, ok := sb.(sandbox.Named); ok && n.SessionID() != "" {
		id = n.SessionID() // a pooled sandbox was labelled before this reset
	}
	s := &session{env: e, id: id, sb: sb, start: time.Now()}
	e.log.Info("session started", "session_id", id, "sandbox", shortID(sb.ID()))
	return s, nil
}

// limits returns the episode limits of the environment.
func (e *TaskEnv) limits() gym.EpisodeLimits {
	return gym.EpisodeLimits{
		MaxActions:     e.cfg.MaxActions,
		GlobalTimeout:  gym.Duration(e.cfg.Timeouts.Global),
		CommandTimeout: gym.Duration(e.cfg.Timeouts.Command),
	}
}

func newSessionID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return "s-" + hex.EncodeToString(b[:])
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
