package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/envs/sandbox"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/waittest"
)

// TestServeKilledJanitorRemovesSnapshots kills `gymserver serve` with
// SIGKILL while a session and a snapshot of it exist, with an orphan
// timeout far beyond the test, and checks that the container and the
// snapshot image go within a bound and that the janitor serve started saw
// its end and finished. Other gymservers starting on the host meanwhile
// (other tests) may reap the dead server's objects first, so which
// process removed them is checked in envs/docker (TestJanitorAfterSIGKILL),
// whose owner no other gymserver reaps.
func TestServeKilledJanitorRemovesSnapshots(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	const within = 30 * time.Second
	bin := validateBinary(t)
	cli := dockerClient(t)
	logPath := filepath.Join(t.TempDir(), "janitor.log")
	cmd, waited, ownerPrefix, url := killableServe(t, bin, []*client.Client{cli}, "--config", calculatorConfig, "--addr", "127.0.0.1:0",
		"--orphan-after", "1h", "--janitor-log", logPath, "--log-level", "WARN", "--snapshot-archive-max", "-1")

	ctx := t.Context()
	c, err := gymclient.Dial(ctx, url, gymclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, _, err := c.Reset(ctx, "calculator_api", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	owners, err := ownersWithPrefix(ctx, cli, ownerPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(owners) != 1 {
		t.Fatalf("owners %q of the server's containers, want one", owners)
	}
	owned := filters.NewArgs(filters.Arg("label", sandbox.LabelOwner+"="+owners[0]))
	containers, err := cli.ContainerList(ctx, container.ListOptions{Filters: owned})
	if err != nil {
		t.Fatal(err)
	}
	snapshots, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", "gymserver.snapshot"), filters.Arg("label", sandbox.LabelOwner+"="+owners[0]))})
	if err != nil {
		t.Fatal(err)
	}
	if len(containers) == 0 || len(snapshots) != 1 {
		t.Fatalf("%d containers and %d snapshot images of the server, want some and one", len(containers), len(snapshots))
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-waited
	killed := time.Now()
	waittest.Until(t, "the killed server's container and snapshot image to go", within, func() (bool, error) {
		for _, c := range containers {
			if _, err := cli.ContainerInspect(ctx, c.ID); !errdefs.IsNotFound(err) {
				return false, err
			}
		}
		_, err := cli.ImageInspect(ctx, snapshots[0].ID)
		if !errdefs.IsNotFound(err) {
			return false, err
		}
		return true, nil
	})
	t.Logf("%d containers and the snapshot image gone %s after the SIGKILL", len(containers), time.Since(killed).Round(time.Millisecond))
	// The janitor logs its last line after the last removal.
	waittest.Until(t, "the janitor's log to say it is done", within, func() (bool, error) {
		b, err := os.ReadFile(logPath)
		return err == nil && strings.Contains(string(b), "janitor done"), nil
	})
	b, _ := os.ReadFile(logPath)
	for _, want := range []string{"gone without closing", "owner=" + owners[0]} {
		if !strings.Contains(string(b), want) {
			t.Errorf("janitor log lacks %q:\n%s", want, b)
		}
	}
}
