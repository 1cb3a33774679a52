package main

import (
	"context"
	"encoding/json"
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
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: gymserver reap [--all] [--dry-run] [--json] [--label KEY=VALUE]")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	cli, ok := engineClient("gymserver reap", stderr)
	if !ok {
		return 1
	}
	defer cli.Close()
	reaped, err := docker.ReapOrphans(ctx, cli, docker.ReapOptions{All: *all, DryRun: *dryRun, Labels: labels})
	if *jsonOut {
		if reaped == nil {
			reaped = []docker.Reaped{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			DryRun  bool            `json:"dry_run"`
			Removed []docker.Reaped `json:"removed"`
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
			fmt.Fprintf(stdout, "%s %s %s (owner %s: %s)\n", verb, r.Kind, name, r.Owner, r.Reason)
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
