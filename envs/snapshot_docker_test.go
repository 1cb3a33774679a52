package envs_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/envs"
	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
)

// loadEnvWith loads the first environment of an example config with opts
// (the shared Docker provider is filled in).
func loadEnvWith(t *testing.T, example string, opts envs.Options) (*envs.TaskEnv, config.Environment) {
	t.Helper()
	cfg, err := config.Load(filepath.Join("..", "examples", example, "config.json"))
	if err != nil {
		t.Fatalf("load %s: %v", example, err)
	}
	ec := cfg.Environments[0]
	opts.Provider = testProvider(t)
	e, err := envs.New(cfg, ec, opts)
	if err != nil {
		t.Fatalf("new env: %v", err)
	}
	return e, ec
}

// listing is a command that prints what a fork's files look like: every
// entry the agent can change, with type, mode, owner, size and content
// hash (times differ between the two paths: a commit keeps them, an
// archive restores modification times only).
const listing = `cd / && find workspace tmp var/tmp home/agent run/lock -printf '%p %y %m %u:%g %s %l\n' | sort && ` +
	`find workspace tmp home/agent -type f -exec sha256sum {} + | sort`

// TestForkFromArchiveScoresLikeCommit runs the same episode prefix of
// calculator_api in two environments, one whose snapshots are archives
// and one whose snapshots are commits, and forks each: the forks hold the
// same files (types, modes, owners, sizes, contents) and score the same,
// test by test, whether they keep the solution or break it. The prefix
// writes outside the working directory, makes links, a private file and
// a fake test where the hidden tests go (which must not count).
func TestForkFromArchiveScoresLikeCommit(t *testing.T) {
	archEnv, ec := loadEnvWith(t, "calculator_api", envs.Options{})
	commitEnv, _ := loadEnvWith(t, "calculator_api", envs.Options{SnapshotArchiveMax: -1})
	calls, err := envs.ReferenceCalls(ec.Tasks[0])
	if err != nil {
		t.Fatal(err)
	}
	prefix := append(calls[:len(calls)-1:len(calls)-1],
		call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: `set -e
mkdir -p notes/deep tests /tmp/cache
echo draft > notes/deep/todo.txt && chmod 600 notes/deep/todo.txt
ln -s ../app.py notes/app-link && ln notes/deep/todo.txt notes/hard
ln -s /etc/shadow notes/shadow
printf 'def test_fake():\n    assert True\n' > tests/test_fake.py
yes 0123456789abcdef | head -c 100000 > /tmp/cache/blob && chmod 750 /tmp/cache
echo hi > ~/.history && rm -f ~/.bashrc
sleep 1000 >/dev/null 2>&1 &`}))
	snapshot := func(e *envs.TaskEnv, wantMode string) gym.Snapshot {
		t.Helper()
		s, _ := reset(t, e)
		for _, c := range prefix {
			step(t, s, c)
		}
		snap, err := s.(gym.Snapshotter).Snapshot(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if snap.Mode != wantMode {
			t.Fatalf("snapshot mode %q (fallback %q), want %q", snap.Mode, snap.Fallback, wantMode)
		}
		return snap
	}
	archSnap := snapshot(archEnv, gym.SnapshotArchive)
	commitSnap := snapshot(commitEnv, gym.SnapshotCommit)
	if archSnap.Bytes < 100000 || commitSnap.Bytes != 0 {
		t.Errorf("snapshot sizes: archive %d, commit %d", archSnap.Bytes, commitSnap.Bytes)
	}

	// Each fork: what its files look like, then a continuation and the
	// evaluation.
	type outcome struct {
		Files  string
		Reward float64
		Tests  []gym.TestCase
	}
	run := func(e *envs.TaskEnv, snapID string, breakIt bool) outcome {
		t.Helper()
		f, r, err := e.Fork(t.Context(), snapID)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close(context.Background()) })
		if r.ForkOf != snapID || r.Steps != len(prefix) {
			t.Errorf("fork reset: fork_of %q steps %d", r.ForkOf, r.Steps)
		}
		files := step(t, f, call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: listing})).Observation.Text
		if breakIt {
			step(t, f, call(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: "rm app.py"}))
		}
		end := step(t, f, call(gym.ToolMarkDone, gym.MarkDoneArgs{}))
		ev := end.Info.Evaluation
		if ev == nil {
			t.Fatal("no evaluation")
		}
		tests := make([]gym.TestCase, len(ev.Tests))
		for i, tc := range ev.Tests {
			tests[i] = gym.TestCase{Name: tc.Name, Status: tc.Status}
		}
		return outcome{Files: files, Reward: end.Reward, Tests: tests}
	}
	for _, breakIt := range []bool{false, true} {
		fromArchive := run(archEnv, archSnap.ID, breakIt)
		fromCommit := run(commitEnv, commitSnap.ID, breakIt)
		if diff := cmp.Diff(fromCommit, fromArchive); diff != "" {
			t.Errorf("broken %v: fork from an archive differs from a fork from a commit (-commit +archive):\n%s", breakIt, diff)
		}
		if strings.Contains(fromArchive.Files, "home/agent/.bashrc ") {
			t.Errorf("broken %v: ~/.bashrc, which the agent deleted, is in the fork:\n%s", breakIt, fromArchive.Files)
		}
		if want := !breakIt; (fromArchive.Reward == 1) != want {
			t.Errorf("broken %v: reward %v", breakIt, fromArchive.Reward)
		}
		for _, tc := range fromArchive.Tests {
			if tc.Name == "test_fake" || filepath.Base(tc.Name) == "test_fake.py" {
				t.Errorf("the agent's fake test counted: %+v", tc)
			}
		}
	}
	for _, e := range []*envs.TaskEnv{archEnv, commitEnv} {
		for _, id := range []string{archSnap.ID, commitSnap.ID} {
			e.DropSnapshot(t.Context(), id)
		}
	}
}
