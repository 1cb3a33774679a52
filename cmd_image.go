package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/docker/docker/client"

	"github.com/gymserver/gymserver/envs/baseimage"
)

// runImage implements "gymserver image build [REF...]": it makes sure the
// built-in base images exist, pulling them or building them with debootstrap.
func runImage(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gymserver image build [REF...]")
		fmt.Fprintln(stderr, "built-in images:", baseimage.Refs())
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() < 1 || fs.Arg(0) != "build" {
		fs.Usage()
		return 2
	}
	refs := fs.Args()[1:]
	if len(refs) == 0 {
		refs = baseimage.Refs()
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		fmt.Fprintln(stderr, "gymserver image:", err)
		return 1
	}
	defer cli.Close()
	for _, ref := range refs {
		if err := baseimage.Ensure(ctx, cli, ref, stderr); err != nil {
			fmt.Fprintf(stderr, "gymserver image: %s: %v\n", ref, err)
			return 1
		}
		fmt.Fprintln(stdout, ref)
	}
	return 0
}
