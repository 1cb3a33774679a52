// Package baseimage provides the base images gymserver can build itself,
// without a registry: a minimal Debian root file system made with
// debootstrap (python3 and pytest, user "agent" with uid 1000, /workspace)
// and loaded with docker import.
package baseimage

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
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

// RecipeLabel is the image label that holds the hash of the recipe an
// image was built from (see Recipe). Ensure rebuilds an image of ours whose
// label differs, so that a machine with an image cached from an older
// recipe gets the new one; images built from the Dockerfile carry the
// value "dockerfile" and are left alone.
const RecipeLabel = "gymserver.recipe"

// recipes maps each buildable reference to the image settings of docker
// import (besides the recipe label, which Build adds).
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

// Recipe returns the hash of ref's recipe (the build script and the import
// settings), or "" if ref is not Known.
func Recipe(ref string) string {
	changes, ok := recipes[ref]
	if !ok {
		return ""
	}
	h := sha256.New()
	h.Write(buildScript)
	for _, c := range changes {
		fmt.Fprintf(h, "\x00%s", c)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Current reports whether ref is present in the engine and whether it is
// current: built from this package's recipe, from the Dockerfile, or not
// one of ours at all (not Known), which is the user's to keep fresh.
func Current(ctx context.Context, cli *client.Client, ref string) (present, current bool, err error) {
	info, err := cli.ImageInspect(ctx, ref)
	switch {
	case errdefs.IsNotFound(err):
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("inspect image %s: %w", ref, err)
	}
	if !Known(ref) {
		return true, true, nil
	}
	var got string
	if info.Config != nil {
		got = info.Config.Labels[RecipeLabel]
	}
	return true, got == Recipe(ref) || got == "dockerfile", nil
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

// Ensure makes ref present and current: it does nothing if the image
// exists and is Current, else it tries to pull it, and when the pull fails
// (or gives an image of an older recipe) and ref is Known it builds it. A
// stale image is replaced under the same tag; sandboxes and prepared
// images made from it keep working.
func Ensure(ctx context.Context, cli *client.Client, ref string, log io.Writer) error {
	present, current, err := Current(ctx, cli, ref)
	if err != nil || current {
		return err
	}
	if present {
		fmt.Fprintf(log, "image %s was built from an older recipe (label %s); replacing it\n", ref, RecipeLabel)
	}
	pullErr := Pull(ctx, cli, ref)
	if pullErr == nil {
		if _, current, err := Current(ctx, cli, ref); err != nil || current {
			return err
		}
		pullErr = fmt.Errorf("the pulled image is of an older recipe")
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
// exists and is Current; an image of an older recipe is replaced (the old
// one is removed when nothing uses it). A failed build leaves no new image
// and no temporary files.
func Build(ctx context.Context, cli *client.Client, ref string, log io.Writer) error {
	changes, ok := recipes[ref]
	if !ok {
		return fmt.Errorf("build %s: no recipe (known: %s)", ref, strings.Join(Refs(), ", "))
	}
	present, current, err := Current(ctx, cli, ref)
	if err != nil || current {
		return err
	}
	var oldID string
	if present {
		if info, err := cli.ImageInspect(ctx, ref); err == nil {
			oldID = info.ID
		}
	}
	changes = append(append([]string(nil), changes...), "LABEL "+RecipeLabel+"="+Recipe(ref))
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
	if oldID != "" {
		// Best effort: prepared images and containers may still use it.
		_, _ = cli.ImageRemove(ctx, oldID, image.RemoveOptions{})
	}
	return nil
}
