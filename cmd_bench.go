package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gymserver/gymserver/bench"
	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/gym"
)

// runBench implements "gymserver bench": a load generator run against a
// deployment. It opens --conns connections (spread round robin over the
// --url servers), runs --sessions concurrent sessions over them, each
// doing --episodes episodes of --steps steps, and prints throughput,
// latency percentiles by op, errors by code and the servers' CPU per step.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	urls := fs.String("url", os.Getenv("GYMSERVER_URL"), "server WebSocket URL(s), comma-separated (default $GYMSERVER_URL, else ws://127.0.0.1:8080/v1/ws)")
	token := fs.String("token", os.Getenv("GYMSERVER_TOKEN"), "bearer token (default $GYMSERVER_TOKEN)")
	env := fs.String("env", "", "environment id (default: the server's first)")
	task := fs.String("task", "", "task id (default: the server picks one per reset)")
	sessions := fs.Int("sessions", 32, "concurrent sessions (N)")
	conns := fs.Int("conns", 1, "connections (M) the sessions are spread over; round robin over the servers")
	steps := fs.Int("steps", 20, "steps per episode")
	episodes := fs.Int("episodes", 1, "episodes each session slot runs one after the other; later resets are reported as reset_again")
	command := fs.String("command", "echo hi", "shell command each step runs (execute_command)")
	writeBytes := fs.Int("write-bytes", 0, "if > 0, each step writes a file of this many bytes (write_file) instead of running --command")
	noEval := fs.Bool("no-evaluate", false, "do not evaluate (run the hidden tests) at the end of each episode")
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: gymserver bench [--url URL[,URL...]] [--env ID] [--sessions N] [--conns M] [--steps S] [--command CMD | --write-bytes B] [--json]

Runs N concurrent sessions against a running gymserver serve and reports
throughput, latency percentiles (p50/p90/p99/max) of reset, step, evaluate
and close, errors by code, and the server's CPU per step (from its
/metrics process_cpu_seconds_total). Whether resets are warm depends on
the server (serve --warm-pool); bench reports what it measured.`)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() != 0 || *sessions < 1 || *conns < 1 || *steps < 0 || *episodes < 1 || *writeBytes < 0 {
		fs.Usage()
		return 2
	}
	var servers []string
	for _, u := range strings.Split(*urls, ",") {
		if u = strings.TrimSpace(u); u != "" {
			servers = append(servers, u)
		}
	}
	if len(servers) == 0 {
		servers = []string{"ws://127.0.0.1:8080/v1/ws"}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	var clients []*gymclient.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	var envs []gym.Env
	for i := range *conns {
		c, err := gymclient.Dial(ctx, servers[i%len(servers)], gymclient.Options{Token: *token})
		if err != nil {
			fmt.Fprintf(stderr, "gymserver bench: %v\n", err)
			return 1
		}
		clients = append(clients, c)
		if *env == "" {
			specs, err := c.Specs(ctx)
			if err != nil || len(specs) == 0 {
				fmt.Fprintf(stderr, "gymserver bench: list environments: %v (%d found)\n", err, len(specs))
				return 1
			}
			*env = specs[0].ID
		}
		e, err := c.Env(ctx, *env)
		if err != nil {
			fmt.Fprintf(stderr, "gymserver bench: %v\n", err)
			return 1
		}
		envs = append(envs, e)
	}
	used := servers[:min(len(servers), *conns)]
	httpc := &http.Client{Timeout: 30 * time.Second}
	cpuBefore, cpuOK := readCPU(ctx, httpc, used, *token)
	cfg := bench.Config{Env: *env, Task: *task, Sessions: *sessions, Episodes: *episodes, Steps: *steps,
		Command: *command, WriteBytes: *writeBytes, SkipEvaluate: *noEval}
	rep, err := bench.Run(ctx, cfg, envs)
	if err != nil {
		fmt.Fprintf(stderr, "gymserver bench: %v\n", err)
		return 1
	}
	rep.Servers = len(used)
	if cpuOK {
		if cpuAfter, ok := readCPU(ctx, httpc, used, *token); ok {
			rep.SetCPU(cpuAfter-cpuBefore, len(used))
		}
	}
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "gymserver bench: %v\n", err)
			return 1
		}
	} else if err := rep.WriteText(stdout); err != nil {
		fmt.Fprintf(stderr, "gymserver bench: %v\n", err)
		return 1
	}
	return 0
}

// readCPU sums the CPU seconds of the servers; ok is false when one of
// them could not be read.
func readCPU(ctx context.Context, httpc *http.Client, servers []string, token string) (float64, bool) {
	var sum float64
	for _, u := range servers {
		v, err := bench.ReadCPU(ctx, httpc, u, token)
		if err != nil {
			return 0, false
		}
		sum += v
	}
	return sum, true
}
