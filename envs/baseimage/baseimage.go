// Package baseimage provides the base images gymserver can build itself,
// without a registry: a minimal Debian root file system made with
// debootstrap (python3 and pytest, user "agent" with uid 1000, /workspace)
// and loaded with docker import.
package baseimage

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"github.com/docker/docker/pkg/jsonmessage"
)

//go:embed build-rootfs.sh
var buildScript []byte

// Python is the examples' base image: Debian bookworm's python3 (3.11) and
// pytest.
const Python = "gymserver/python:3.11-bookworm"

// recipes maps each buildable reference to the image settings of docker
// import.
var recipes = map[string][]string{
	Python: {
		"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"ENV LANG=C.UTF-8",
		"ENV HOME=/home/agent",
		"ENV PYTHONDONTWRITEBYTECODE=1",
		"WORKDIR /workspace",
		"LABEL gymserver.base=1",
		`CMD ["/bin/bash"]`,
	},
}

// Known reports whether ref is an image this package can build.
func Known(ref string) bool {
	_, ok := recipes[ref]
	return ok
}

// Refs returns the references this package can build, sorted.
func Refs() []string {
	out := make([]string, 0, len(recipes))
	for r := range recipes {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// Exists reports whether ref is present in the engine.
func Exists(ctx context.Context, cli *client.Client, ref string) (bool, error) {
	_, err := cli.ImageInspect(ctx, ref)
	switch {
	case err == nil:
		return true, nil
	case errdefs.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("inspect image %s: %w", ref, err)
}

// Ensure makes ref present: it does nothing if the image exists, else it
// tries to pull it, and when the pull fails and ref is Known it builds it.
func Ensure(ctx context.Context, cli *client.Client, ref string, log io.Writer) error {
	ok, err := Exists(ctx, cli, ref)
	if err != nil || ok {
		return err
	}
	pullErr := Pull(ctx, cli, ref)
	if pullErr == nil {
		return nil
	}
	if !Known(ref) {
		return fmt.Errorf("image %s is not present and cannot be pulled (%v); build or load it first", ref, pullErr)
	}
	fmt.Fprintf(log, "image %s cannot be pulled (%v); building it with debootstrap\n", ref, pullErr)
	return Build(ctx, cli, ref, log)
}

// Pull pulls ref and waits for the pull to finish.
func Pull(ctx context.Context, cli *client.Client, ref string) error {
	rc, err := cli.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	defer rc.Close()
	if err := jsonmessage.DisplayJSONMessagesStream(rc, io.Discard, 0, false, nil); err != nil {
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	return nil
}

// Build builds ref from its recipe with debootstrap and docker import. It
// needs root and the debootstrap program. It returns at once if the image
// exists; a failed build leaves no image and no temporary files.
func Build(ctx context.Context, cli *client.Client, ref string, log io.Writer) error {
	changes, ok := recipes[ref]
	if !ok {
		return fmt.Errorf("build %s: no recipe (known: %s)", ref, strings.Join(Refs(), ", "))
	}
	if ok, err := Exists(ctx, cli, ref); err != nil || ok {
		return err
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return fmt.Errorf("build %s: debootstrap is not installed (apt-get install debootstrap): %w", ref, err)
	}
	dir, err := os.MkdirTemp("", "gymserver-rootfs-")
	if err != nil {
		return fmt.Errorf("build %s: %w", ref, err)
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "build-rootfs.sh")
	if err := os.WriteFile(script, buildScript, 0o755); err != nil {
		return fmt.Errorf("build %s: %w", ref, err)
	}
	tarball := filepath.Join(dir, "rootfs.tar")
	cmd := exec.CommandContext(ctx, "bash", script, filepath.Join(dir, "rootfs"), tarball)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s: root file system: %w", ref, err)
	}
	f, err := os.Open(tarball)
	if err != nil {
		return fmt.Errorf("build %s: %w", ref, err)
	}
	defer f.Close()
	fmt.Fprintf(log, "importing %s\n", ref)
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: f, SourceName: "-"}, ref, image.ImportOptions{Changes: changes})
	if err != nil {
		return fmt.Errorf("build %s: import: %w", ref, err)
	}
	defer rc.Close()
	if err := jsonmessage.DisplayJSONMessagesStream(rc, io.Discard, 0, false, nil); err != nil {
		return fmt.Errorf("build %s: import: %w", ref, err)
	}
	fmt.Fprintf(log, "built %s\n", ref)
	return nil
}
