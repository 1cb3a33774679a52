package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/gymserver/gymserver/envs/docker"
)

// janitorCommand is the hidden subcommand that runs a provider's janitor
// (docker.RunJanitor); the provider starts it with the read end of its
// pipe as descriptor 3.
const janitorCommand = "__janitor"

// janitorFD is the descriptor of the pipe the janitor watches
// (exec.Cmd.ExtraFiles[0]).
const janitorFD = 3

// runJanitor implements "gymserver __janitor --owner ID": it waits until
// the provider holding the other end of descriptor 3 is gone, then removes
// its containers and snapshot images. It is not meant to be run by hand.
func runJanitor(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(janitorCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	owner := fs.String("owner", "", "owner id of the provider watched; required")
	grace := fs.Duration("grace", docker.DefaultJanitorGrace, "after the provider is gone without closing, wait this long before removing")
	retryFor := fs.Duration("retry-for", docker.DefaultJanitorRetryFor, "keep retrying for this long while the Docker Engine is unreachable")
	logPath := fs.String("log", "", "append the log to this file (default: stderr)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *owner == "" || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "usage: gymserver __janitor --owner ID [--grace D] [--retry-for D] [--log FILE], with the pipe to watch as descriptor 3")
		return 2
	}
	logOut := stderr
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			fmt.Fprintln(stderr, "gymserver __janitor:", err)
		} else {
			defer f.Close()
			logOut = f
		}
	}
	logger := slog.New(slog.NewTextHandler(logOut, nil)).With("janitor_pid", os.Getpid())
	// Only a pipe: end of file on anything else says nothing about the
	// provider.
	var st syscall.Stat_t
	if err := syscall.Fstat(janitorFD, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		logger.Error("descriptor 3 is not the provider's pipe", "err", err)
		return 2
	}
	// Non-blocking, so that a signal ends the wait.
	if err := syscall.SetNonblock(janitorFD, true); err != nil {
		logger.Error("descriptor 3", "err", err)
		return 2
	}
	watch := os.NewFile(janitorFD, "provider-pipe")
	defer watch.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := docker.RunJanitor(ctx, docker.JanitorOptions{
		Owner:    *owner,
		Watch:    watch,
		Grace:    *grace,
		RetryFor: *retryFor,
		Logger:   logger,
	})
	if err != nil {
		logger.Error("janitor failed", "err", err)
		return 1
	}
	return 0
}
