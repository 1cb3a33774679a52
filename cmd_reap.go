package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/docker/docker/client"

	"github.com/gymserver/gymserver/envs/docker"
)

// runReap implements "gymserver reap": it removes the containers and
// snapshot images of gymserver processes that are gone or whose lease
// passed, which a server killed with SIGKILL leaves behind until another
// one starts.
func runReap(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("reap", flag.ContinueOnError)
	fs.SetOutput(stderr)
	all := fs.Bool("all", false, "remove every gymserver container and snapshot image, whatever its owner, also those of running servers")
	jsonOut := fs.Bool("json", false, "print what was removed as JSON")
	dryRun := fs.Bool("dry-run", false, "list what would be removed and remove nothing")
	var labels labelsFlag
	fs.Var(&labels, "label", "only reap containers and images with this KEY or KEY=VALUE label (repeatable)")
	var engines engineFlags
	fs.Var(&engines.hosts, "docker-host", "reap this Docker Engine, as for serve: URL[,name=NAME][,tls=CERTDIR] (repeat for several; default: $DOCKER_HOST alone)")
	fs.StringVar(&engines.file, "engines", "", "reap the engines of this JSON file too (as for serve)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: gymserver reap [--all] [--dry-run] [--json] [--label KEY=VALUE] [--docker-host URL ...] [--engines FILE]")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	targets, err := reapTargets(&engines)
	if err != nil {
		fmt.Fprintln(stderr, "gymserver reap:", err)
		return 2
	}
	var reaped []reapedOn
	var errs []error
	for _, tg := range targets {
		cli, err := tg.client()
		if err != nil {
			errs = append(errs, engineErr(tg.name, err))
			continue
		}
		got, err := docker.ReapOrphans(ctx, cli, docker.ReapOptions{All: *all, DryRun: *dryRun, Labels: labels})
		cli.Close()
		for _, r := range got {
			reaped = append(reaped, reapedOn{Engine: tg.name, Reaped: r})
		}
		if err != nil {
			errs = append(errs, engineErr(tg.name, err))
		}
	}
	err = errors.Join(errs...)
	if *jsonOut {
		if reaped == nil {
			reaped = []reapedOn{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			DryRun  bool       `json:"dry_run"`
			Removed []reapedOn `json:"removed"`
		}{*dryRun, reaped})
	} else {
		verb := "removed"
		if *dryRun {
			verb = "would remove"
		}
		for _, r := range reaped {
			name := r.ID
			if r.Ref != "" {
				name = r.Ref
			} else if len(name) > 12 {
				name = name[:12]
			}
			on := ""
			if r.Engine != "" {
				on = " on engine " + r.Engine
			}
			fmt.Fprintf(stdout, "%s %s %s%s (owner %s: %s)\n", verb, r.Kind, name, on, r.Owner, r.Reason)
		}
		if len(reaped) == 0 && err == nil {
			fmt.Fprintln(stderr, "gymserver reap: nothing to remove")
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "gymserver reap:", err)
		return 1
	}
	return 0
}

// reapedOn is a removed container or image and the engine it was on
// ("" for $DOCKER_HOST's).
type reapedOn struct {
	Engine string `json:"engine,omitempty"`
	docker.Reaped
}

// reapTarget is one engine gymserver reap cleans.
type reapTarget struct {
	name   string // "" for the engine of $DOCKER_HOST
	client func() (*client.Client, error)
}

// reapTargets returns the engines the flags name, or the engine of
// $DOCKER_HOST when they name none.
func reapTargets(e *engineFlags) ([]reapTarget, error) {
	eps, err := e.endpoints()
	if err != nil {
		return nil, err
	}
	if len(eps) == 0 {
		return []reapTarget{{client: func() (*client.Client, error) {
			return client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		}}}, nil
	}
	var out []reapTarget
	for i, ep := range eps {
		name := ep.Name
		if name == "" {
			name = fmt.Sprintf("engine%d", i)
		}
		out = append(out, reapTarget{name: name, client: ep.Client})
	}
	return out, nil
}

// engineErr names the engine an error of gymserver reap came from.
func engineErr(name string, err error) error {
	if name == "" {
		return err
	}
	return fmt.Errorf("engine %s: %w", name, err)
}

// labelsFlag collects repeated --label values.
type labelsFlag []string

func (l *labelsFlag) String() string { return strings.Join(*l, ",") }

func (l *labelsFlag) Set(v string) error {
	if v == "" || strings.HasPrefix(v, "=") {
		return fmt.Errorf("want KEY or KEY=VALUE, got %q", v)
	}
	*l = append(*l, v)
	return nil
}

// engineClient connects to the Docker Engine the environment names; on
// failure it reports the error for cmd on stderr.
func engineClient(cmd string, stderr io.Writer) (*client.Client, bool) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		fmt.Fprintf(stderr, "%s: docker client: %v\n", cmd, err)
		return nil, false
	}
	return cli, true
}
