package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/waittest"
)

// dockerClient returns a client of the local Engine, closed with the test.
func dockerClient(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// deadPid returns the pid of a process that has exited, (almost surely)
// free.
func deadPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// reapOutput is what `gymserver reap --json` prints.
type reapOutput struct {
	DryRun  bool            `json:"dry_run"`
	Removed []docker.Reaped `json:"removed"`
}

// TestReapCommand runs `gymserver reap` on a container and a snapshot image
// of a dead owner and of a live one, all labelled for this test alone.
func TestReapCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	bin := validateBinary(t)
	cli := dockerClient(t)
	ctx := t.Context()
	var b [6]byte
	_, _ = rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	// --label keeps the command away from anything this test did not make.
	testLabel := "gymserver.test-reap=" + tag
	host, _ := os.Hostname()
	deadOwner := fmt.Sprintf("%s:%d:test", host, deadPid(t))
	// The live owner is a process of its own: a provider started by
	// another test in this process would take an owner with this process's
	// pid for an earlier process's and reap it.
	live := exec.Command("sleep", "600")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })
	liveOwner := fmt.Sprintf("%s:%d:test", host, live.Process.Pid)
	labels := func(owner string) map[string]string {
		return map[string]string{sandbox.LabelOwner: owner, "gymserver.test-reap": tag}
	}
	mkContainer := func(owner string) string {
		resp, err := cli.ContainerCreate(ctx, &container.Config{Image: baseimage.Python, Cmd: []string{"sleep", "600"}, Labels: labels(owner)}, nil, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.ContainerRemove(context.Background(), resp.ID, container.RemoveOptions{Force: true}) })
		return resp.ID
	}
	mkSnapshot := func(owner, name string) string {
		tmp, err := cli.ContainerCreate(ctx, &container.Config{Image: baseimage.Python, Cmd: []string{"true"}}, nil, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		defer cli.ContainerRemove(context.Background(), tmp.ID, container.RemoveOptions{Force: true})
		l := labels(owner)
		l["gymserver.snapshot"] = "1"
		ref := "gymserver-snapshot:test-" + tag + "-" + name
		resp, err := cli.ContainerCommit(ctx, tmp.ID, container.CommitOptions{Reference: ref, Config: &container.Config{Labels: l}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = cli.ImageRemove(context.Background(), resp.ID, image.RemoveOptions{Force: true, PruneChildren: true})
		})
		return resp.ID
	}

	reap := func(args ...string) reapOutput {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, append([]string{"reap", "--json", "--label", testLabel}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("reap %v: %v\n%s", args, err, stderr.String())
		}
		var r reapOutput
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("reap %v output %q: %v", args, out, err)
		}
		return r
	}
	check := func(name string, r reapOutput, deadC, deadI string) {
		t.Helper()
		got := map[string]docker.Reaped{}
		for _, x := range r.Removed {
			got[x.ID] = x
		}
		if got[deadC].Kind != "container" || got[deadI].Kind != "image" {
			t.Fatalf("%s: removed %+v, want the dead owner's container %s and image %s", name, r.Removed, deadC, deadI)
		}
		for _, x := range r.Removed {
			if x.Owner != deadOwner || x.Reason != docker.ReasonOwnerGone {
				t.Errorf("%s: %+v, want owner %s and reason %q", name, x, deadOwner, docker.ReasonOwnerGone)
			}
		}
	}
	exists := func(kind, id string) bool {
		t.Helper()
		var err error
		if kind == "container" {
			_, err = cli.ContainerInspect(ctx, id)
		} else {
			_, err = cli.ImageInspect(ctx, id)
		}
		if err != nil && !errdefs.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}

	// Every provider that starts on this engine (other tests, other
	// packages' tests) reaps the dead owner's objects too; an attempt in
	// which one of them was first is tried again with new objects.
	const attempts = 5
	for attempt := 1; ; attempt++ {
		deadC, liveC := mkContainer(deadOwner), mkContainer(liveOwner)
		deadI, liveI := mkSnapshot(deadOwner, "dead"+strconv.Itoa(attempt)), mkSnapshot(liveOwner, "live"+strconv.Itoa(attempt))
		raced := func(r reapOutput) bool {
			listed := map[string]bool{}
			for _, x := range r.Removed {
				listed[x.ID] = true
			}
			if (listed[deadC] && listed[deadI]) || attempt == attempts {
				return false
			}
			t.Logf("attempt %d: another reaper removed the dead owner's objects first; again", attempt)
			return true
		}

		dry := reap("--dry-run")
		if raced(dry) {
			continue
		}
		if !dry.DryRun {
			t.Error("dry run output says dry_run false")
		}
		check("dry run", dry, deadC, deadI)
		for _, x := range []struct{ kind, id string }{{"container", liveC}, {"image", liveI}} {
			if !exists(x.kind, x.id) {
				t.Errorf("dry run removed %s %s", x.kind, x.id)
			}
		}

		r := reap()
		if raced(r) {
			continue
		}
		check("reap", r, deadC, deadI)
		if exists("container", deadC) || exists("image", deadI) {
			t.Error("the dead owner's container or image is still there")
		}
		if !exists("container", liveC) || !exists("image", liveI) {
			t.Error("the live owner's container or image was removed")
		}
		if again := reap(); len(again.Removed) != 0 {
			t.Errorf("second reap removed %+v", again.Removed)
		}
		return
	}
}

// TestServeKilledLeavesNoContainers kills `gymserver serve` with SIGKILL
// while a session is open and checks that its sandboxes remove themselves
// within the orphan timeout; without a janitor, which would remove them
// first.
func TestServeKilledLeavesNoContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	const orphanAfter = 3 * time.Second
	bin := validateBinary(t)
	cli := dockerClient(t)
	cmd, waited, ownerPrefix, url := killableServe(t, bin, []*client.Client{cli}, "--config", calculatorConfig, "--addr", "127.0.0.1:0",
		"--orphan-after", orphanAfter.String(), "--no-janitor", "--log-level", "WARN")

	ctx := t.Context()
	c, err := gymclient.Dial(ctx, url, gymclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.Reset(ctx, "calculator_api", gym.ResetRequest{}); err != nil {
		t.Fatal(err)
	}
	owners, err := ownersWithPrefix(ctx, cli, ownerPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(owners) != 1 {
		t.Fatalf("owners %q of the server's containers, want one", owners)
	}
	list, err := cli.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelOwner+"="+owners[0]))})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) == 0 {
		t.Fatal("no running container for the session")
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-waited
	killed := time.Now()
	waittest.Until(t, "the killed server's containers to go", orphanAfter+30*time.Second, func() (bool, error) {
		for _, c := range list {
			_, err := cli.ContainerInspect(ctx, c.ID)
			if err == nil {
				return false, nil
			}
			if !errdefs.IsNotFound(err) {
				return false, err
			}
		}
		return true, nil
	})
	t.Logf("%d containers gone %s after the SIGKILL", len(list), time.Since(killed).Round(time.Millisecond))
}

// ownersWithPrefix returns the distinct owner labels of containers that
// start with prefix.
func ownersWithPrefix(ctx context.Context, cli *client.Client, prefix string) ([]string, error) {
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelOwner))})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, c := range list {
		if o := c.Labels[sandbox.LabelOwner]; strings.HasPrefix(o, prefix) && !seen[o] {
			seen[o] = true
			out = append(out, o)
		}
	}
	return out, nil
}

// serveURL reads a `gymserver serve` process's stderr until it says where
// it listens and returns its WebSocket URL; waited closes when the process
// exits.
func serveURL(t *testing.T, stderr io.Reader, waited <-chan struct{}) string {
	t.Helper()
	addr := make(chan string, 1)
	go func() {
		listening := regexp.MustCompile(`^listening on (\S+)$`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case a := <-addr:
		return "ws://" + a + "/v1/ws"
	case <-waited:
		t.Fatal("serve exited before listening")
	case <-time.After(5 * time.Minute):
		t.Fatal("serve did not print its address")
	}
	return ""
}

// killableServe starts `gymserver serve` with args after "serve", for a
// test that kills it. It returns the process, a channel closed when it
// exited, the prefix of its providers' owner ids ("host:pid:") and its
// WebSocket URL. When the test ends the process is killed and what it
// left on the engines of clis (containers, snapshot images) is removed.
func killableServe(t *testing.T, bin string, clis []*client.Client, args ...string) (cmd *exec.Cmd, waited <-chan struct{}, ownerPrefix, url string) {
	t.Helper()
	cmd = exec.Command(bin, append([]string{"serve"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	host, _ := os.Hostname()
	ownerPrefix = fmt.Sprintf("%s:%d:", host, cmd.Process.Pid)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		// On failure, remove what the killed server left.
		ctx := context.Background()
		for _, cli := range clis {
			owners, err := ownersWithPrefix(ctx, cli, ownerPrefix)
			if err != nil {
				continue
			}
			for _, o := range owners {
				_ = docker.RemoveOwned(ctx, cli, o)
				imgs, _ := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(
					filters.Arg("label", "gymserver.snapshot"), filters.Arg("label", sandbox.LabelOwner+"="+o))})
				for _, img := range imgs {
					_, _ = cli.ImageRemove(ctx, img.ID, image.RemoveOptions{Force: true, PruneChildren: true})
				}
			}
		}
	})
	return cmd, done, ownerPrefix, serveURL(t, stderr, done)
}

// TestReapCommandOverEngines runs `gymserver reap --docker-host` over the
// host's engine and an engine the test starts: a dead owner's container
// on each is removed and reported with its engine.
func TestReapCommandOverEngines(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	bin := validateBinary(t)
	extra := dockertest.StartEngine(t, "reap")
	ctx := t.Context()
	var b [6]byte
	_, _ = rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	host, _ := os.Hostname()
	deadOwner := fmt.Sprintf("%s:%d:test", host, deadPid(t))
	labels := map[string]string{sandbox.LabelOwner: deadOwner, "gymserver.test-reap": tag}

	// The extra engine has no image: an empty one is enough for a
	// container that is only created.
	var empty bytes.Buffer
	if err := tar.NewWriter(&empty).Close(); err != nil {
		t.Fatal(err)
	}
	rc, err := extra.Client().ImageImport(ctx, image.ImportSource{Source: &empty, SourceName: "-"}, "gymserver-test-empty:"+tag, image.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, rc)
	rc.Close()
	mk := func(cli *client.Client, img string) string {
		resp, err := cli.ContainerCreate(ctx, &container.Config{Image: img, Cmd: []string{"/none"}, Labels: labels}, nil, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.ContainerRemove(context.Background(), resp.ID, container.RemoveOptions{Force: true}) })
		return resp.ID
	}
	onMain := mk(dockerClient(t), baseimage.Python)
	onExtra := mk(extra.Client(), "gymserver-test-empty:"+tag)

	cmd := exec.CommandContext(ctx, bin, "reap", "--json", "--label", "gymserver.test-reap="+tag,
		"--docker-host", mainDockerHost()+",name=main", "--docker-host", extra.Host()+",name=extra")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reap: %v\n%s", err, stderr.String())
	}
	var r struct {
		Removed []struct {
			Engine string `json:"engine"`
			docker.Reaped
		} `json:"removed"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("reap output %q: %v", out, err)
	}
	got := map[string]string{}
	for _, x := range r.Removed {
		got[x.ID] = x.Engine
	}
	if len(r.Removed) != 2 || got[onMain] != "main" || got[onExtra] != "extra" {
		t.Fatalf("removed %s, want %s on main and %s on extra", out, onMain, onExtra)
	}
	for name, c := range map[string]struct {
		cli *client.Client
		id  string
	}{"main": {dockerClient(t), onMain}, "extra": {extra.Client(), onExtra}} {
		if _, err := c.cli.ContainerInspect(ctx, c.id); !errdefs.IsNotFound(err) {
			t.Errorf("engine %s: container %s still there (%v)", name, c.id, err)
		}
	}
}

// mainDockerHost is the address of the host's own engine.
func mainDockerHost() string {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h
	}
	return client.DefaultDockerHost
}
