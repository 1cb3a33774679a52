package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	units "github.com/docker/go-units"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
)

// imageUsage is the synopsis of "gymserver image".
const imageUsage = `usage: gymserver image build [REF...]
       gymserver image ls [--json] [--label KEY=VALUE]
       gymserver image prune [--all] [--dry-run] [--max-images N] [--max-bytes SIZE] [--min-idle D] [--json] [--label KEY=VALUE]`

// runImage implements "gymserver image": build the base images, list the
// image cache, prune it.
func runImage(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, imageUsage)
		return 2
	}
	switch args[0] {
	case "build":
		return runImageBuild(ctx, args[1:], stdout, stderr)
	case "ls":
		return runImageLs(ctx, args[1:], stdout, stderr)
	case "prune":
		return runImagePrune(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, imageUsage)
		return 0
	}
	fmt.Fprintf(stderr, "gymserver image: unknown command %q\n%s\n", args[0], imageUsage)
	return 2
}

// runImageBuild implements "gymserver image build [REF...]": it makes sure
// the built-in base images exist, pulling them or building them with
// debootstrap.
func runImageBuild(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("image build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: gymserver image build [REF...]")
		fmt.Fprintln(fs.Output(), "built-in images:", baseimage.Refs())
	}
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	refs := fs.Args()
	if len(refs) == 0 {
		refs = baseimage.Refs()
	}
	cli, ok := engineClient("gymserver image", stderr)
	if !ok {
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

// runImageLs implements "gymserver image ls": the prepared images,
// Dockerfile builds and snapshots on the Docker Engine.
func runImageLs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("image ls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	jsonOut := fs.Bool("json", false, "print the images as JSON")
	var labels labelsFlag
	fs.Var(&labels, "label", "only list images with this KEY or KEY=VALUE label (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: gymserver image ls [--json] [--label KEY=VALUE]")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	cli, ok := engineClient("gymserver image ls", stderr)
	if !ok {
		return 1
	}
	defer cli.Close()
	list, err := docker.ListCache(ctx, cli, labels...)
	if err != nil {
		fmt.Fprintln(stderr, "gymserver image ls:", err)
		return 1
	}
	if *jsonOut {
		if list == nil {
			list = []docker.CachedImage{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(list)
		return 0
	}
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REF\tKIND\tSIZE\tLAST-USED\tIN-USE")
	var total int64
	for _, img := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%s\n", imageName(img), img.Kind, units.HumanSize(float64(img.Size)),
			units.HumanDuration(now.Sub(img.LastUsed.Time)), inUse(img))
		total += img.Size
	}
	tw.Flush()
	fmt.Fprintf(stderr, "%d images, %s\n", len(list), units.HumanSize(float64(total)))
	return 0
}

// imageName is an image's ref, or its short id for a dangling one.
func imageName(img docker.CachedImage) string {
	if img.Ref != "" {
		return img.Ref
	}
	id := strings.TrimPrefix(img.ID, "sha256:")
	if len(id) > 12 {
		id = id[:12]
	}
	return "<none>@" + id
}

// inUse is the IN-USE column: the containers using the image, or "no".
func inUse(img docker.CachedImage) string {
	if !img.InUse {
		return "no"
	}
	return strings.Join(img.UsedBy, ",")
}

// pruneOutput is what "gymserver image prune --json" prints.
type pruneOutput struct {
	DryRun bool `json:"dry_run"`
	// Removed are the images removed, or to be removed on a dry run.
	Removed []docker.Removed `json:"removed"`
	// Kept are the candidates that stay, with the reason.
	Kept []docker.Removed `json:"kept"`
	// Volumes are the shared volumes removed: the /usr ones of base
	// images that are gone and the executor ones of other executor builds
	// (none on a dry run).
	Volumes []string `json:"volumes_removed"`
}

// runImagePrune implements "gymserver image prune": by default it removes
// the prepared images of other executor builds (other gymserver binaries)
// and the gymserver images that lost their tag, never an image a
// container uses nor one used within --min-idle.
func runImagePrune(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("image prune", flag.ContinueOnError)
	fs.SetOutput(stderr)
	all := fs.Bool("all", false, "remove every gymserver image (prepared, build, snapshot) that is not in use")
	dryRun := fs.Bool("dry-run", false, "list what would be removed and remove nothing")
	maxImages := fs.Int("max-images", 0, "also remove the least recently used prepared and build images beyond this many (0: no cap)")
	var maxBytes sizeFlag
	fs.Var(&maxBytes, "max-bytes", "also remove the least recently used prepared and build images beyond this size, e.g. 20GiB (0: no cap)")
	minIdle := fs.Duration("min-idle", docker.DefaultImageCacheMinIdle, "keep images used more recently than this, and shared volumes made more recently; running servers mark the images they hold as used every few minutes")
	jsonOut := fs.Bool("json", false, "print what was removed and kept as JSON")
	var labels labelsFlag
	fs.Var(&labels, "label", "only prune images with this KEY or KEY=VALUE label (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: gymserver image prune [--all] [--dry-run] [--max-images N] [--max-bytes SIZE] [--min-idle D] [--json] [--label KEY=VALUE]")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	if *maxImages < 0 {
		fmt.Fprintln(stderr, "gymserver image prune: --max-images must not be negative")
		return 2
	}
	// Prepared images hold the binary that made them as their executor:
	// those of another binary are stale.
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "gymserver image prune: find own executable:", err)
		return 1
	}
	hash, err := docker.ExecutorHash(self)
	if err != nil {
		fmt.Fprintln(stderr, "gymserver image prune: hash own executable:", err)
		return 1
	}
	cli, ok := engineClient("gymserver image prune", stderr)
	if !ok {
		return 1
	}
	defer cli.Close()
	results, err := docker.PruneCache(ctx, cli, docker.PruneOptions{
		All:           *all,
		Dangling:      true,
		StaleExecutor: hash,
		MaxImages:     *maxImages,
		MaxBytes:      int64(maxBytes),
		MinIdle:       *minIdle,
		Labels:        labels,
		DryRun:        *dryRun,
	})
	out := pruneOutput{DryRun: *dryRun, Removed: []docker.Removed{}, Kept: []docker.Removed{}, Volumes: []string{}}
	// The shared volumes carry no label of the user's, so --label, which
	// narrows the prune to what has that label, leaves them all.
	if !*dryRun && len(labels) == 0 {
		vols, verr := docker.PruneUsrVolumes(ctx, cli, *minIdle)
		out.Volumes = append(out.Volumes, vols...)
		err = errors.Join(err, verr)
		vols, verr = docker.PruneExecutorVolumes(ctx, cli, hash, *minIdle)
		out.Volumes = append(out.Volumes, vols...)
		err = errors.Join(err, verr)
	}
	var freed int64
	for _, r := range results {
		if r.Kept == "" {
			out.Removed = append(out.Removed, r)
			freed += r.Size
		} else {
			out.Kept = append(out.Kept, r)
		}
	}
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
	} else {
		verb := "removed"
		if *dryRun {
			verb = "would remove"
		}
		for _, r := range out.Removed {
			fmt.Fprintf(stdout, "%s %s %s (%s, %s)\n", verb, r.Kind, imageName(r.CachedImage), units.HumanSize(float64(r.Size)), r.Reason)
		}
		for _, r := range out.Kept {
			fmt.Fprintf(stdout, "kept %s %s (%s): %s\n", r.Kind, imageName(r.CachedImage), r.Reason, r.Kept)
		}
		for _, v := range out.Volumes {
			fmt.Fprintf(stdout, "removed volume %s (its base image is gone)\n", v)
		}
		fmt.Fprintf(stderr, "gymserver image prune: %s %d images, %s\n", verb, len(out.Removed), units.HumanSize(float64(freed)))
	}
	if err != nil {
		fmt.Fprintln(stderr, "gymserver image prune:", err)
		return 1
	}
	return 0
}

// sizeFlag is a flag of a size in bytes, such as 500MiB or 20GiB.
type sizeFlag int64

func (f *sizeFlag) String() string { return strconv.FormatInt(int64(*f), 10) }

func (f *sizeFlag) Set(v string) error {
	n, err := units.RAMInBytes(v)
	if err != nil || n < 0 {
		return fmt.Errorf("want a size such as 500MiB or 20GiB, got %q", v)
	}
	*f = sizeFlag(n)
	return nil
}

// cacheCapFlags are the image cache caps of serve and rollout; see
// docker.Options.ImageCacheMaxImages.
type cacheCapFlags struct {
	maxImages int
	maxBytes  sizeFlag
}

// register adds --image-cache-max-images and --image-cache-max-bytes to fs.
func (c *cacheCapFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&c.maxImages, "image-cache-max-images", 0, "after each image build, remove the least recently used unused prepared images beyond this many (0: no cap)")
	fs.Var(&c.maxBytes, "image-cache-max-bytes", "after each image build, remove the least recently used unused prepared images beyond this size, e.g. 50GiB (0: no cap)")
}
