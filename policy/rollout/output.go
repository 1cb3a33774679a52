package rollout

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gymserver/gymserver/gym"
)

// StatsPath returns the stats file that goes with a results file:
// results.json → results.stats.json.
func StatsPath(results string) string {
	ext := filepath.Ext(results)
	return strings.TrimSuffix(results, ext) + ".stats" + ext
}

// TrajectoryDir returns the trajectory directory of a run: dir as given
// when absolute, else relative to the results file's directory.
func TrajectoryDir(results, dir string) string {
	if filepath.IsAbs(dir) {
		return dir
	}
	return filepath.Join(filepath.Dir(results), dir)
}

// TrajectoryName is the path of an episode's trajectory inside the
// trajectory directory; it depends only on the environment, the task and
// the episode's index among the task's episodes, so that a resumed run
// finds it. A task named like its environment (the one task of a seed
// config) keeps the name ENV-N.json; any other is ENV/TASK-N.json, one
// folder per environment, which no two tasks share since ids hold no '/'.
func TrajectoryName(env, task string, episode int) string {
	if task == "" || task == env {
		return fmt.Sprintf("%s-%d.json", env, episode)
	}
	return filepath.Join(env, fmt.Sprintf("%s-%d.json", task, episode))
}

// WriteJSON writes v as indented JSON to path atomically: to a temporary
// file in the same directory, synced, then renamed over path. Readers see
// the old file or the new one, never a part.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	b = append(b, '\n')
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// readTrajectory reads a trajectory written by an earlier run. It returns
// false when there is none or it cannot be used, and the episode is run.
func readTrajectory(path string) (*gym.Trajectory, bool, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var t gym.Trajectory
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, false, fmt.Errorf("trajectory %s: %w", path, err)
	}
	return &t, true, nil
}

// RecordOf summarises a trajectory as a results-file record; file is the
// trajectory file's path as the record names it.
func RecordOf(t *gym.Trajectory, file string) Record {
	return Record{
		TrajectoryID:   t.TrajectoryID,
		EnvironmentID:  t.EnvironmentID,
		TaskID:         t.TaskID,
		Episode:        t.Episode,
		SessionID:      t.SessionID,
		TrajectoryFile: file,
		StartTime:      t.StartTime,
		EndTime:        t.EndTime,
		Turns:          len(t.Turns),
		Usage:          t.Usage,
		EpisodeResult:  t.EpisodeResult,
	}
}
