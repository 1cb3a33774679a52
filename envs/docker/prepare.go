package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/jsonmessage"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
)

// PreparedRepo is the repository of prepared images; tags are content hashes.
const PreparedRepo = "gymserver-prepared"

// labelPrepared marks prepared images with their full content hash.
const labelPrepared = "gymserver.prepared"

// prepareUser runs the main process of the containers that prepare images,
// and the executor that holds them open.
const prepareUser = "0:0"

// defaultInitTimeout bounds one init command.
const defaultInitTimeout = 10 * time.Minute

// Prepare returns the prepared image for spec, building it once: the base
// image plus the executor, the files and the init commands' effects,
// committed under a tag derived from a hash of all of them. The image
// stays in the cache while the provider lives; after a build, the cache is
// held to Options.ImageCacheMaxImages and ImageCacheMaxBytes.
func (p *Provider) Prepare(ctx context.Context, spec sandbox.ImageSpec) (string, error) {
	baseID, err := p.ensureBase(ctx, spec.BaseImage)
	if err != nil {
		return "", err
	}
	key := p.prepareKey(baseID, spec)
	ref := PreparedRepo + ":" + key[:24]
	for {
		// A cache hit re-tags the image: its tag time is the cache's LRU
		// clock (see ListCache).
		if err := p.touchImage(ctx, ref); err == nil {
			p.cache.hold(ref)
			return ref, nil
		} else if !isNotFound(err) {
			return "", gym.Classify(fmt.Errorf("docker: tag %s: %w", ref, err), gym.ClassSandbox)
		}
		p.mu.Lock()
		wait, busy := p.building[key]
		if !busy {
			wait = make(chan struct{})
			p.building[key] = wait
		}
		p.mu.Unlock()
		if busy {
			// Someone else builds it; look again when they are done.
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		err := p.build(ctx, spec, baseID, ref, key)
		p.mu.Lock()
		delete(p.building, key)
		close(wait)
		p.mu.Unlock()
		if err != nil {
			return "", err
		}
		p.cache.hold(ref)
		p.enforceCacheCap(ctx)
		return ref, nil
	}
}

// ensureBase makes the base image present and returns its id: pulled if
// possible, else built by Options.BuildBase.
func (p *Provider) ensureBase(ctx context.Context, ref string) (string, error) {
	if ref == "" {
		return "", fmt.Errorf("docker: no base image: %w", gym.ErrInvalidArgument)
	}
	if info, err := p.cli.ImageInspect(ctx, ref); err == nil {
		return info.ID, nil
	}
	pullErr := p.pull(ctx, ref)
	if pullErr != nil {
		if p.opts.BuildBase == nil {
			return "", gym.Classify(fmt.Errorf("docker: image %s is not present and cannot be pulled: %w", ref, pullErr), gym.ClassSandbox)
		}
		p.log.Info("base image cannot be pulled; building it", "image", ref, "pull_error", pullErr.Error())
		if err := p.opts.BuildBase(ctx, ref); err != nil {
			return "", gym.Classify(fmt.Errorf("docker: image %s: cannot be pulled (%v) nor built: %w", ref, pullErr, err), gym.ClassSandbox)
		}
	}
	info, err := p.cli.ImageInspect(ctx, ref)
	if err != nil {
		return "", gym.Classify(fmt.Errorf("docker: image %s: %w", ref, err), gym.ClassSandbox)
	}
	return info.ID, nil
}

func (p *Provider) pull(ctx context.Context, ref string) error {
	rc, err := p.cli.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return err
	}
	defer rc.Close()
	return jsonmessage.DisplayJSONMessagesStream(rc, devNull{}, 0, false, nil)
}

type devNull struct{}

func (devNull) Write(p []byte) (int, error) { return len(p), nil }

// prepareKey hashes everything that goes into a prepared image.
func (p *Provider) prepareKey(baseID string, spec sandbox.ImageSpec) string {
	h := sha256.New()
	field := func(s string) { fmt.Fprintf(h, "%d:%s\n", len(s), s) }
	field("gymserver-prepare-v2")
	field(baseID)
	field(p.execHash)
	field(strings.Join(p.opts.ExecutorArgs, "\x00"))
	field(spec.WorkDir)
	for _, e := range envList(spec.Env) {
		field(e)
	}
	files := append([]sandbox.File(nil), spec.Files...)
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	for _, f := range files {
		sum := sha256.Sum256(f.Data)
		field(fmt.Sprintf("%s %o %x", f.Path, f.Mode.Perm(), sum))
	}
	for _, c := range spec.InitCommands {
		field(c)
	}
	if spec.OwnWorkDir {
		field("own-workdir")
	}
	return hex.EncodeToString(h.Sum(nil))
}

// build makes the prepared image ref: a root-run container of the base
// image gets the executor and the files, runs the init commands as the
// sandbox user, and is committed.
func (p *Provider) build(ctx context.Context, spec sandbox.ImageSpec, baseID, ref, key string) error {
	fail := func(err error) error {
		return gym.Classify(fmt.Errorf("docker: prepare %s from %s: %w", ref, spec.BaseImage, err), gym.ClassSandbox)
	}
	workdir := spec.WorkDir
	if workdir == "" {
		workdir = "/"
	}
	init := true
	created, err := p.cli.ContainerCreate(ctx, &container.Config{
		Image:      spec.BaseImage,
		Cmd:        p.idleCmd(),
		User:       prepareUser,
		Env:        envList(spec.Env),
		WorkingDir: "/",
		Labels:     p.labels(map[string]string{labelPrepared: key}),
	}, &container.HostConfig{Init: &init, AutoRemove: true}, nil, nil, "")
	if err != nil {
		return fail(err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
		defer cancel()
		if err := p.remove(rctx, created.ID); err != nil {
			p.log.Warn("remove prepare container", "err", err)
		}
	}()
	archive, err := p.prepareArchive(workdir, spec.Files)
	if err != nil {
		return fail(err)
	}
	if err := p.cli.CopyToContainer(ctx, created.ID, "/", archive, container.CopyToContainerOptions{}); err != nil {
		return fail(fmt.Errorf("copy files: %w", err))
	}
	if err := p.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return fail(fmt.Errorf("start: %w", err))
	}
	// The init commands run with plain execs; an executor held open keeps
	// the container from ending as an orphan while we build.
	release, err := p.holdExecutor(ctx, created.ID, prepareUser)
	if err != nil {
		return fail(err)
	}
	defer release()
	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = defaultInitTimeout
	}
	if spec.OwnWorkDir && workdir != "/" {
		argv := []string{"chown", "-R", sandboxUser, workdir}
		code, out, err := p.execOnce(ctx, created.ID, prepareUser, "/", nil, argv, timeout)
		if err != nil || code != 0 {
			return fail(fmt.Errorf("give %s to the sandbox user: exit %d: %v %s", workdir, code, err, tail(out, 2000)))
		}
	}
	for i, cmd := range spec.InitCommands {
		p.log.Info("running init command", "image", ref, "command", cmd)
		code, out, err := p.execOnce(ctx, created.ID, sandboxUser, workdir, envList(spec.Env), []string{"/bin/sh", "-c", cmd}, timeout)
		if err != nil {
			return fail(fmt.Errorf("init command %d (%s): %w", i, cmd, err))
		}
		if code != 0 {
			return fail(fmt.Errorf("init command %d (%s) exited with %d: %s", i, cmd, code, tail(out, 2000)))
		}
	}
	labels := map[string]string{labelPrepared: key, labelExecutor: p.execHash, labelKind: KindPrepared}
	if same, err := p.usrUnchanged(ctx, created.ID); err != nil {
		return fail(fmt.Errorf("list changes: %w", err))
	} else if same {
		labels[labelUsrBase] = baseID
	}
	_, err = p.cli.ContainerCommit(ctx, created.ID, container.CommitOptions{
		Reference: ref,
		Comment:   "gymserver prepared image",
		Pause:     true,
		Config: &container.Config{
			Cmd:        p.executorCmd("idle"),
			User:       sandboxUser,
			WorkingDir: workdir,
			Env:        envList(spec.Env),
			Labels:     labels,
		},
	})
	if err != nil {
		return fail(fmt.Errorf("commit: %w", err))
	}
	p.log.Info("prepared image", "image", ref, "base", spec.BaseImage)
	return nil
}

// prepareArchive builds the tar of the executor, the working directory and
// the files; the working directory and the files belong to the sandbox user.
func (p *Provider) prepareArchive(workdir string, files []sandbox.File) (*bytes.Buffer, error) {
	bin, err := os.ReadFile(p.opts.ExecutorBinary)
	if err != nil {
		return nil, fmt.Errorf("read executor: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: ".gymserver/", Mode: 0o755, ModTime: now}); err != nil {
		return nil, err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: executorPath[1:], Mode: 0o755, Size: int64(len(bin)), ModTime: now}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := writeUserFiles(tw, workdir, files); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return &buf, nil
}

// filesArchive builds the tar of the working directory and the files, all
// the sandbox user's.
func filesArchive(workdir string, files []sandbox.File) (*bytes.Buffer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := writeUserFiles(tw, workdir, files); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return &buf, nil
}

// writeUserFiles adds the working directory, the folders between it and
// the files, and the files to tw, owned by the sandbox user.
func writeUserFiles(tw *tar.Writer, workdir string, files []sandbox.File) error {
	now := time.Now()
	add := func(h *tar.Header, data []byte) error {
		h.ModTime = now
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	// Directories from the working directory down are the user's.
	userDirs := map[string]bool{}
	if workdir != "/" {
		userDirs[workdir] = true
	}
	for _, f := range files {
		for d := path.Dir(f.Path); d != "/" && (d == workdir || strings.HasPrefix(d, workdir+"/")); d = path.Dir(d) {
			userDirs[d] = true
		}
	}
	dirs := make([]string, 0, len(userDirs))
	for d := range userDirs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		if err := add(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o755, Uid: 1000, Gid: 1000}, nil); err != nil {
			return err
		}
	}
	for _, f := range files {
		if !path.IsAbs(f.Path) {
			return fmt.Errorf("file %s: path is not absolute", f.Path)
		}
		mode := int64(f.Mode.Perm())
		if mode == 0 {
			mode = 0o644
		}
		if err := add(&tar.Header{Typeflag: tar.TypeReg, Name: f.Path[1:], Mode: mode, Size: int64(len(f.Data)), Uid: 1000, Gid: 1000}, f.Data); err != nil {
			return err
		}
	}
	return nil
}

// execOnce runs one command with a plain docker exec and returns its exit
// code and combined output.
func (p *Provider) execOnce(ctx context.Context, id, user, dir string, env, argv []string, timeout time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ex, err := p.cli.ContainerExecCreate(ctx, id, container.ExecOptions{
		User: user, AttachStdout: true, AttachStderr: true, WorkingDir: dir, Env: env, Cmd: argv,
	})
	if err != nil {
		return 0, nil, err
	}
	conn, err := p.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(&out, &out, conn.Reader)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return 0, out.Bytes(), err
		}
	case <-ctx.Done():
		conn.Close()
		<-done
		return 0, out.Bytes(), fmt.Errorf("timed out after %s", timeout)
	}
	info, err := p.cli.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		return 0, out.Bytes(), err
	}
	if info.Running {
		return 0, out.Bytes(), errors.New("exec still running after its output ended")
	}
	return info.ExitCode, out.Bytes(), nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
