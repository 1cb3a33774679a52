package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/gymserver/gymserver/envs/fleet"
	"github.com/gymserver/gymserver/envs/sandbox"
)

// engineFlags are the Docker Engines of serve and rollout: repeated
// --docker-host flags and an --engines file.
type engineFlags struct {
	hosts         hostsFlag
	file          string
	healthEvery   time.Duration
	healthTimeout time.Duration
}

// register adds the engine flags to fs.
func (e *engineFlags) register(fs *flag.FlagSet) {
	fs.Var(&e.hosts, "docker-host", "a Docker Engine to run sandboxes on, as URL[,capacity=N][,name=NAME][,tls=CERTDIR] (unix://, tcp://; repeat for several engines; default: $DOCKER_HOST alone)")
	fs.StringVar(&e.file, "engines", "", `JSON file listing Docker Engines: [{"host": URL, "capacity": N, "name": NAME, "tls": CERTDIR}, ...], added to --docker-host`)
	fs.DurationVar(&e.healthEvery, "engine-health-every", fleet.DefaultHealthEvery, "with several engines: how often each is pinged; one that fails is down until a ping succeeds")
	fs.DurationVar(&e.healthTimeout, "engine-health-timeout", fleet.DefaultHealthTimeout, "with several engines: how long a health ping may take")
}

// endpoints returns the engines the flags name; none means the engine of
// $DOCKER_HOST, without a fleet.
func (e *engineFlags) endpoints() ([]fleet.Endpoint, error) {
	var eps []fleet.Endpoint
	for _, h := range e.hosts {
		ep, err := fleet.ParseEndpoint(h)
		if err != nil {
			return nil, err
		}
		eps = append(eps, ep)
	}
	if e.file != "" {
		more, err := fleet.LoadEndpoints(e.file)
		if err != nil {
			return nil, err
		}
		eps = append(eps, more...)
	}
	return eps, nil
}

// hostsFlag collects repeated --docker-host values.
type hostsFlag []string

func (h *hostsFlag) String() string { return strings.Join(*h, " ") }

func (h *hostsFlag) Set(v string) error {
	if _, err := fleet.ParseEndpoint(v); err != nil {
		return err
	}
	*h = append(*h, v)
	return nil
}

// newSandboxProvider returns the provider of the environments: a fleet
// when opts name engines, else the Docker provider of $DOCKER_HOST.
func newSandboxProvider(ctx context.Context, logger *slog.Logger, opts loadOptions) (sandbox.Provider, error) {
	eps, err := opts.Engines.endpoints()
	if err != nil {
		return nil, err
	}
	if len(eps) == 0 {
		return newProvider(ctx, logger, opts)
	}
	o, err := dockerOptions(logger, opts)
	if err != nil {
		return nil, err
	}
	f, err := fleet.New(ctx, fleet.Options{
		Endpoints:     eps,
		Docker:        o,
		BuildBase:     baseBuilder(logger),
		HealthEvery:   opts.Engines.healthEvery,
		HealthTimeout: opts.Engines.healthTimeout,
		Logger:        logger,
	})
	if err != nil {
		return nil, err
	}
	for _, e := range f.Engines() {
		logger.Info("docker engine", "name", e.Name, "host", e.Host, "capacity", e.Capacity)
	}
	if opts.OnFleet != nil {
		opts.OnFleet(f)
	}
	return f, nil
}

// checkEngines reports a usage error in the engine flags.
func checkEngines(e *engineFlags) error {
	if _, err := e.endpoints(); err != nil {
		return fmt.Errorf("engines: %w", err)
	}
	return nil
}
