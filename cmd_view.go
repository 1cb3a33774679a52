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

// runView writes the HTML report of a rollout's outputs, or of two
// rollouts side by side.
func runView(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("view", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "HTML file to write (default: RESULTS with the extension .html, or A.compare.html for two runs; - for stdout)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: gymserver view RESULTS.json|TRAJECTORY.json [-o report.html]")
		fmt.Fprintln(fs.Output(), "       gymserver view A/results.json B/results.json [-o compare.html]   (two runs side by side)")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, reorderArgs(fs, args), stdout, stderr); !ok {
		return code
	}
	if fs.NArg() != 1 && fs.NArg() != 2 {
		fs.Usage()
		return 2
	}
	var runs []*view.Run
	for _, src := range fs.Args() {
		run, err := view.Load(src)
		if err != nil {
			fmt.Fprintf(stderr, "gymserver view: %v\n", err)
			return 1
		}
		prefix := ""
		if fs.NArg() == 2 {
			prefix = src + ": "
		}
		for i, msg := range run.TrajectoryErrors {
			fmt.Fprintf(stderr, "gymserver view: warning: %sepisode %s: %s\n", prefix, run.Records[i].TrajectoryID, msg)
		}
		runs = append(runs, run)
	}
	src := fs.Arg(0)
	var buf bytes.Buffer
	var err error
	if len(runs) == 2 {
		err = view.WriteCompare(&buf, runs[0], runs[1])
	} else {
		err = view.Write(&buf, runs[0])
	}
	if err != nil {
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
		if len(runs) == 2 {
			dest = strings.TrimSuffix(src, filepath.Ext(src)) + ".compare.html"
		}
	}
	if err := os.WriteFile(dest, buf.Bytes(), 0o644); err != nil {
		fmt.Fprintf(stderr, "gymserver view: %v\n", err)
		return 1
	}
	if len(runs) == 2 {
		fmt.Fprintf(stderr, "comparison: %s (%d and %d episodes)\n", dest, len(runs[0].Records), len(runs[1].Records))
		return 0
	}
	fmt.Fprintf(stderr, "report: %s (%d episodes)\n", dest, len(runs[0].Records))
	return 0
}
