package view

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/policy/rollout"
)

// ErrNotResults is returned by Load for a file that is neither a rollout
// results file nor a trajectory file.
var ErrNotResults = errors.New("not a rollout results file (a JSON array of episode records) nor a trajectory file")

// Run is a rollout's outputs as read from disk.
type Run struct {
	// Source is the path Load read.
	Source string
	// Records are the results file's records, in its order; a trajectory
	// file gives one.
	Records []rollout.Record
	// Stats is the stats file's content, or computed from Records when
	// there is none (StatsComputed).
	Stats         rollout.Stats
	StatsComputed bool
	// Trajectories holds the trajectory of each record, nil when it
	// could not be read; TrajectoryErrors says why, by record index.
	Trajectories     []*gym.Trajectory
	TrajectoryErrors map[int]string
}

// Load reads a results file (summary or seed format), the stats file
// beside it and the trajectories its records name, or a single trajectory
// file. The results file must be readable and well-formed; a missing stats
// file or trajectory is not an error: the stats are computed from the
// records and the episode is shown without its transcript.
func Load(path string) (*Run, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimSpace(b)
	run := &Run{Source: path, TrajectoryErrors: map[int]string{}}
	switch {
	case len(b) > 0 && b[0] == '[':
		if err := json.Unmarshal(b, &run.Records); err != nil {
			return nil, fmt.Errorf("%s: %w: %v", path, ErrNotResults, err)
		}
		for i, r := range run.Records {
			if r.TrajectoryID == "" || r.EnvironmentID == "" {
				return nil, fmt.Errorf("%s: record %d has no trajectory_id or environment_id: %w", path, i, ErrNotResults)
			}
		}
		run.loadTrajectories(path)
	case len(b) > 0 && b[0] == '{':
		var t gym.Trajectory
		if err := json.Unmarshal(b, &t); err != nil {
			return nil, fmt.Errorf("%s: %w: %v", path, ErrNotResults, err)
		}
		if t.TrajectoryID == "" || t.EnvironmentID == "" {
			return nil, fmt.Errorf("%s: no trajectory_id or environment_id: %w", path, ErrNotResults)
		}
		run.Records = []rollout.Record{rollout.RecordOf(&t, filepath.Base(path))}
		run.Trajectories = []*gym.Trajectory{&t}
	default:
		return nil, fmt.Errorf("%s: %w", path, ErrNotResults)
	}
	if err := run.loadStats(path); err != nil {
		return nil, err
	}
	return run, nil
}

// loadTrajectories reads the trajectory of every record; a path is
// relative to the results file's directory unless absolute.
func (r *Run) loadTrajectories(results string) {
	r.Trajectories = make([]*gym.Trajectory, len(r.Records))
	for i, rec := range r.Records {
		if rec.TrajectoryFile == "" {
			r.TrajectoryErrors[i] = "the record names no trajectory file"
			continue
		}
		p := rec.TrajectoryFile
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(results), p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			r.TrajectoryErrors[i] = err.Error()
			continue
		}
		var t gym.Trajectory
		if err := json.Unmarshal(b, &t); err != nil {
			r.TrajectoryErrors[i] = fmt.Sprintf("trajectory %s: %v", p, err)
			continue
		}
		r.Trajectories[i] = &t
	}
}

// loadStats reads the stats file beside a results file, or computes the
// stats from the records when there is none. A stats file that exists but
// cannot be read or decoded is an error.
func (r *Run) loadStats(results string) error {
	p := rollout.StatsPath(results)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &r.Stats); err != nil {
			return fmt.Errorf("stats %s: %w", p, err)
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("stats %s: %w", p, err)
	}
	r.StatsComputed = true
	r.Stats = rollout.Compute(r.Records, plansOf(r.Records))
	return nil
}

// plansOf lists the environments and tasks the records cover, sorted, as
// the plans rollout.Compute counts tasks over.
func plansOf(recs []rollout.Record) []rollout.EnvPlan {
	tasks := map[string]map[string]bool{}
	for _, r := range recs {
		if tasks[r.EnvironmentID] == nil {
			tasks[r.EnvironmentID] = map[string]bool{}
		}
		tasks[r.EnvironmentID][cmp.Or(r.TaskID, r.EnvironmentID)] = true
	}
	var plans []rollout.EnvPlan
	for _, env := range slices.Sorted(maps.Keys(tasks)) {
		ids := slices.Sorted(maps.Keys(tasks[env]))
		plans = append(plans, rollout.EnvPlan{ID: env, TaskCount: len(ids), Tasks: ids})
	}
	return plans
}
