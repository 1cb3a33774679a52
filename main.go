// Command gymserver is a Gym-style environment server for training LLM agents
// with reinforcement learning: Docker sandboxes driven over a WebSocket +
// msgpack protocol, rewards from hidden unit tests, and a built-in LLM policy
// driver that runs whole episodes.
//
// Usage:
//
//	gymserver serve    --config CONFIG.json [--addr 127.0.0.1:8080] [--token T]
//	gymserver rollout  CONFIG.json [--policy llm|oracle|replay:FILE] [--output results.json]
//	gymserver validate CONFIG.json [--solve] [--json]
//	gymserver image build [REF...]
//	gymserver image ls [--json]
//	gymserver image prune [--all] [--dry-run] [--max-images N] [--max-bytes SIZE] [--json]
//	gymserver reap     [--all] [--dry-run] [--json]
//	gymserver view     RESULTS.json [-o report.html]
//	gymserver bench    [--url URL] [--sessions N] [--conns M] [--steps S] [--command CMD | --write-bytes B] [--json]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/gymserver/gymserver/envs/executor"
)

// executorCommand is the hidden subcommand that runs the in-sandbox
// executor; the Docker backend copies this binary into every sandbox.
const executorCommand = "__executor"

func main() {
	if len(os.Args) > 1 && os.Args[1] == executorCommand {
		os.Exit(executor.Main(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == janitorCommand {
		os.Exit(runJanitor(os.Args[2:], os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a subcommand and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], stdout, stderr)
	case "rollout":
		return runRollout(ctx, args[1:], stdout, stderr)
	case "validate":
		return runValidate(ctx, args[1:], stdout, stderr)
	case "image":
		return runImage(ctx, args[1:], stdout, stderr)
	case "reap":
		return runReap(ctx, args[1:], stdout, stderr)
	case "view":
		return runView(ctx, args[1:], stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "gymserver: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `gymserver: a Gym-style environment server for LLM agents

Commands:
  serve     --config CONFIG.json    serve the environments over WebSocket (/v1/ws)
  rollout   CONFIG.json             run episodes with an LLM (or oracle/replay) policy
  validate  CONFIG.json             check a config; --solve proves the reference solution
  image     build [REF...]          build the registry-free base image (debootstrap)
  image     ls | prune              list the image cache; remove stale or unused images
  reap      [--all] [--dry-run]     remove containers and snapshots of dead servers
  view      RESULTS.json            write a rollout's HTML report (stats, plots, transcripts)
  bench     [--url URL]             load a running server: N sessions, latency percentiles, errors, CPU per step

Run "gymserver COMMAND -h" for a command's flags.
`)
}

// parseFlags parses a command's args into fs, whose Usage writes to
// fs.Output(). Asked for help (-h, -help, --help), it prints the usage on
// stdout, the requested output, and the command exits 0; a bad flag prints
// the error and the usage on stderr and exits 2. ok is true when the
// command goes on.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		fs.SetOutput(stderr)
		return 0, false
	}
	fmt.Fprintf(stderr, "gymserver %s: %v\n", fs.Name(), err)
	fs.Usage()
	return 2, false
}
