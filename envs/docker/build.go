package docker

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/errdefs"
	"github.com/docker/docker/pkg/jsonmessage"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"

	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// BuildRepo is the repository of images built from task Dockerfiles; tags
// are content hashes.
const BuildRepo = "gymserver-build"

// DefaultBuildTimeout bounds a build whose spec sets no timeout.
const DefaultBuildTimeout = 10 * time.Minute

// buildOutputTail is how much of a failed build's output its error keeps.
const buildOutputTail = 3000

// BuildSpec describes an image to build from a Dockerfile: every file
// under ContextDir that its .dockerignore does not exclude is sent to the
// Engine and hashed; Name is the task's id, for errors and the
// gymserver.task label (sandbox.LabelTask) of the image; Timeout defaults
// to DefaultBuildTimeout.
type BuildSpec = sandbox.BuildSpec

var (
	_ sandbox.Builder        = (*Provider)(nil)
	_ sandbox.ImageInspector = (*Provider)(nil)
)

// ImageWorkDir returns the working directory an image's config sets.
func (p *Provider) ImageWorkDir(ctx context.Context, ref string) (string, error) {
	info, err := p.cli.ImageInspect(ctx, ref)
	if err != nil {
		return "", gym.Classify(fmt.Errorf("docker: inspect %s: %w", ref, err), gym.ClassSandbox)
	}
	if info.Config == nil {
		return "", nil
	}
	return info.Config.WorkingDir, nil
}

// Build builds spec with the Engine's classic builder and returns the
// image's reference, BuildRepo:<first 24 hex digits of the content hash>.
// The hash covers every file of the context that .dockerignore keeps
// (path, mode and bytes, or a symlink's target) and the ids of the FROM
// images, so an unchanged task is built once: when the tag exists Build
// returns it without building (each call still reads and hashes the
// context), and a concurrent call for the same content waits for the
// first. FROM images that are not present are pulled, or made with
// Options.BuildBase.
//
// A Dockerfile that fails to build is the task author's error: it wraps
// gym.ErrInvalidArgument and carries the failing step, its message and the
// tail of the output. A build that runs past its timeout, and Engine
// failures, are gym.ClassSandbox. Intermediate containers are removed
// even when a step fails.
func (p *Provider) Build(ctx context.Context, spec BuildSpec) (string, error) {
	if spec.Name == "" {
		return "", fmt.Errorf("docker: build: no task name: %w", gym.ErrInvalidArgument)
	}
	dir, dockerfile, err := checkBuildSpec(spec)
	if err != nil {
		return "", fmt.Errorf("docker: build task %s: %v: %w", spec.Name, err, gym.ErrInvalidArgument)
	}
	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = DefaultBuildTimeout
	}
	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	key, err := p.buildKey(bctx, dir, dockerfile)
	if err != nil {
		return "", p.buildErr(ctx, bctx, spec, timeout, err)
	}
	ref := BuildRepo + ":" + key[:24]
	busyKey := "build:" + key // p.building is shared with Prepare
	for {
		// A hit marks the image used (the cache's clock) and held.
		if err := p.touchImage(bctx, ref); err == nil {
			p.cache.hold(ref)
			return ref, nil
		} else if !isNotFound(err) {
			return "", p.buildErr(ctx, bctx, spec, timeout, fmt.Errorf("inspect %s: %w", ref, err))
		}
		p.mu.Lock()
		wait, busy := p.building[busyKey]
		if !busy {
			wait = make(chan struct{})
			p.building[busyKey] = wait
		}
		p.mu.Unlock()
		if busy {
			select {
			case <-wait:
				continue
			case <-bctx.Done():
				return "", p.buildErr(ctx, bctx, spec, timeout, bctx.Err())
			}
		}
		err := p.imageBuild(bctx, spec, dir, dockerfile, ref, key)
		p.mu.Lock()
		delete(p.building, busyKey)
		close(wait)
		p.mu.Unlock()
		if err != nil {
			return "", p.buildErr(ctx, bctx, spec, timeout, err)
		}
		p.log.Info("built image", "image", ref, "task_id", spec.Name)
		p.cache.hold(ref)
		p.enforceCacheCap(ctx)
		return ref, nil
	}
}

// checkBuildSpec returns the absolute context directory and the
// Dockerfile's slash-separated path inside it.
func checkBuildSpec(spec BuildSpec) (string, string, error) {
	if spec.ContextDir == "" {
		return "", "", errors.New("no context directory")
	}
	dir, err := filepath.Abs(spec.ContextDir)
	if err != nil {
		return "", "", err
	}
	if fi, err := os.Stat(dir); err != nil {
		return "", "", err
	} else if !fi.IsDir() {
		return "", "", fmt.Errorf("context %s is not a directory", dir)
	}
	df := spec.Dockerfile
	if df == "" {
		df = "Dockerfile"
	}
	if !filepath.IsLocal(df) {
		return "", "", fmt.Errorf("dockerfile %s is not inside the context %s", df, dir)
	}
	if fi, err := os.Stat(filepath.Join(dir, df)); err != nil {
		return "", "", err
	} else if !fi.Mode().IsRegular() {
		return "", "", fmt.Errorf("dockerfile %s is not a regular file", df)
	}
	return dir, filepath.ToSlash(filepath.Clean(df)), nil
}

// buildErr classifies err: the caller's cancellation stays as it is, a
// timeout and unclassified errors are sandbox errors, and errors already
// classified (a broken Dockerfile) keep their class.
func (p *Provider) buildErr(ctx, bctx context.Context, spec BuildSpec, timeout time.Duration, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case bctx.Err() != nil:
		return gym.Classify(fmt.Errorf("docker: build task %s: timed out after %s", spec.Name, timeout), gym.ClassSandbox)
	case gym.ClassOf(err) == gym.ClassInternal:
		return gym.Classify(fmt.Errorf("docker: build task %s: %w", spec.Name, err), gym.ClassSandbox)
	}
	return fmt.Errorf("docker: build task %s: %w", spec.Name, err)
}

// buildKey hashes the build's inputs: the context's files in lexical
// order, the Dockerfile's name, and the ids of its FROM images, which are
// made present on the way.
func (p *Provider) buildKey(ctx context.Context, dir, dockerfile string) (string, error) {
	h := sha256.New()
	field := func(s string) { fmt.Fprintf(h, "%d:%s\n", len(s), s) }
	field("gymserver-build-v1")
	field(dockerfile)
	err := walkContext(dir, dockerfile, func(rel string, fi fs.FileInfo, link string) error {
		switch {
		case fi.IsDir():
			field(fmt.Sprintf("d %s %o", rel, fi.Mode().Perm()))
		case link != "":
			field(fmt.Sprintf("l %s %s", rel, link))
		default:
			f, err := os.Open(filepath.Join(dir, rel))
			if err != nil {
				return err
			}
			defer f.Close()
			fh := sha256.New()
			if _, err := io.Copy(fh, f); err != nil {
				return err
			}
			field(fmt.Sprintf("f %s %o %x", rel, fi.Mode().Perm(), fh.Sum(nil)))
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("read context: %w", err)
	}
	froms, err := fromImages(filepath.Join(dir, filepath.FromSlash(dockerfile)))
	if err != nil {
		return "", gym.Classify(err, gym.ClassInvalidArgument)
	}
	for _, ref := range froms {
		id, err := p.ensureBase(ctx, ref)
		if err != nil {
			return "", err
		}
		field("from " + ref + " " + id)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// walkContext calls fn for every file and directory of the build context
// under dir, except dir itself, in lexical order, with its slash-separated
// relative path and, for a symlink, its target. Paths that dir's
// .dockerignore excludes are left out, but never the Dockerfile (df) or
// the .dockerignore itself, as the docker CLI does. Special files are an
// error.
func walkContext(dir, df string, fn func(rel string, fi fs.FileInfo, link string) error) error {
	ignore, err := dockerignore(dir)
	if err != nil {
		return err
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ignore != nil && rel != df && rel != ".dockerignore" {
			excluded, err := ignore.MatchesOrParentMatches(filepath.FromSlash(rel))
			if err != nil {
				return fmt.Errorf(".dockerignore: %w", err)
			}
			if excluded {
				// Look inside only for files an exception or the
				// Dockerfile brings back.
				if d.IsDir() && !ignore.Exclusions() && !strings.HasPrefix(df, rel+"/") {
					return fs.SkipDir
				}
				return nil
			}
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		case fi.IsDir(), fi.Mode().IsRegular():
		default:
			return fmt.Errorf("%s: unsupported file type %s", rel, fi.Mode().Type())
		}
		return fn(rel, fi, link)
	})
}

// dockerignore returns the matcher of dir's .dockerignore, or nil when it
// has none.
func dockerignore(dir string) (*patternmatcher.PatternMatcher, error) {
	f, err := os.Open(filepath.Join(dir, ".dockerignore"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf(".dockerignore: %w", err)
	}
	if len(patterns) == 0 {
		return nil, nil
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		return nil, fmt.Errorf(".dockerignore: %w", err)
	}
	return pm, nil
}

// fromImages returns the images a Dockerfile's FROM lines name, leaving
// out "scratch", earlier stages' names and references with build
// arguments in them.
func fromImages(dockerfile string) ([]string, error) {
	f, err := os.Open(dockerfile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var refs []string
	stages := map[string]bool{"scratch": true}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || !strings.EqualFold(fields[0], "FROM") {
			continue
		}
		args := fields[1:]
		for len(args) > 0 && strings.HasPrefix(args[0], "--") {
			args = args[1:]
		}
		if len(args) == 0 {
			return nil, fmt.Errorf("dockerfile: FROM without an image")
		}
		ref := args[0]
		known := stages[strings.ToLower(ref)] || strings.Contains(ref, "$")
		if len(args) >= 3 && strings.EqualFold(args[1], "AS") {
			stages[strings.ToLower(args[2])] = true
		}
		if known {
			continue
		}
		refs = append(refs, ref)
	}
	return refs, sc.Err()
}

// imageBuild runs the classic builder and tags the result ref.
func (p *Provider) imageBuild(ctx context.Context, spec BuildSpec, dir, dockerfile, ref, key string) error {
	p.log.Info("building image", "image", ref, "task_id", spec.Name, "context", dir)
	pr, pw := io.Pipe()
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		pw.CloseWithError(writeContext(pw, dir, dockerfile))
	}()
	defer func() {
		pr.Close() // unblocks the writer if the Engine stopped reading
		<-wrote
	}()
	resp, err := p.cli.ImageBuild(ctx, pr, build.ImageBuildOptions{
		Tags:        []string{ref},
		Dockerfile:  dockerfile,
		Remove:      true,
		ForceRemove: true,
		PullParent:  false,
		Version:     build.BuilderV1,
		Labels:      map[string]string{labelBuild: key, labelKind: KindBuild, sandbox.LabelTask: spec.Name},
	})
	if err != nil {
		if errdefs.IsInvalidParameter(err) {
			return fmt.Errorf("%v: %w", err, gym.ErrInvalidArgument)
		}
		return err
	}
	defer resp.Body.Close()
	if err := readBuildOutput(resp.Body); err != nil {
		return err
	}
	if _, err := p.cli.ImageInspect(ctx, ref); err != nil {
		return fmt.Errorf("image %s missing after its build: %w", ref, err)
	}
	return nil
}

// ansiColor matches the colour codes the builder puts around stderr.
var ansiColor = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// readBuildOutput reads the builder's jsonmessage stream to its end and
// returns the error it reports, if any, with the failing step and the
// output's tail.
func readBuildOutput(r io.Reader) error {
	dec := json.NewDecoder(r)
	var out []byte
	step := ""
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read build output: %w", err)
		}
		if m.Stream != "" {
			for _, line := range strings.Split(m.Stream, "\n") {
				if strings.HasPrefix(line, "Step ") {
					step = strings.TrimSpace(line)
				}
			}
			out = append(out, m.Stream...)
			if len(out) > 2*buildOutputTail {
				out = append([]byte(nil), out[len(out)-buildOutputTail:]...)
			}
		}
		if m.Error != nil || m.ErrorMessage != "" {
			msg := m.ErrorMessage
			if m.Error != nil {
				msg = m.Error.Message
			}
			if step != "" {
				msg = step + ": " + msg
			}
			out = ansiColor.ReplaceAll(out, nil)
			return fmt.Errorf("%s: %w\noutput:\n%s", msg, gym.ErrInvalidArgument, tail(out, buildOutputTail))
		}
	}
}

// writeContext writes the build context as a tar stream: the files and
// directories walkContext visits, owned by root, with its mode and modification time.
func writeContext(w io.Writer, dir, dockerfile string) error {
	tw := tar.NewWriter(w)
	err := walkContext(dir, dockerfile, func(rel string, fi fs.FileInfo, link string) error {
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = rel
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(filepath.Join(dir, rel))
		if err != nil {
			return err
		}
		defer f.Close()
		// A file that grew since it was hashed is cut at its stat size.
		_, err = io.Copy(tw, io.LimitReader(f, h.Size))
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
