package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gymserver/gymserver/view"
)

// runView writes the HTML report of a rollout's outputs.
func runView(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("view", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "HTML file to write (default: RESULTS with the extension .html; - for stdout)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: gymserver view RESULTS.json|TRAJECTORY.json [-o report.html]")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, reorderArgs(fs, args), stdout, stderr); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	src := fs.Arg(0)
	run, err := view.Load(src)
	if err != nil {
		fmt.Fprintf(stderr, "gymserver view: %v\n", err)
		return 1
	}
	for i, msg := range run.TrajectoryErrors {
		fmt.Fprintf(stderr, "gymserver view: warning: episode %s: %s\n", run.Records[i].TrajectoryID, msg)
	}
	var buf bytes.Buffer
	if err := view.Write(&buf, run); err != nil {
		fmt.Fprintf(stderr, "gymserver view: %v\n", err)
		return 1
	}
	dest := *out
	if dest == "-" {
		if _, err := buf.WriteTo(stdout); err != nil {
			fmt.Fprintf(stderr, "gymserver view: %v\n", err)
			return 1
		}
		return 0
	}
	if dest == "" {
		dest = strings.TrimSuffix(src, filepath.Ext(src)) + ".html"
	}
	if err := os.WriteFile(dest, buf.Bytes(), 0o644); err != nil {
		fmt.Fprintf(stderr, "gymserver view: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "report: %s (%d episodes)\n", dest, len(run.Records))
	return 0
}
