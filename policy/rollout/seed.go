package rollout

import (
	"fmt"

	"github.com/gymserver/gymserver/gym"
)

// Results formats: what each record of the results file holds.
const (
	// ResultsSummary writes one Record per episode, a summary that names
	// its trajectory file. It is the default.
	ResultsSummary = "summary"
	// ResultsSeed writes each episode whole, as the Real Work seed's
	// results file did (a list of trajectories): a SeedRecord, the Record
	// plus the seed's steps, test_results, metadata and episode_result
	// fields, so that a seed user's scripts read it unchanged. The records
	// are kept in memory for the run, as the seed kept them.
	ResultsSeed = "seed"
)

// checkResultsFormat reports whether f names a results format.
func checkResultsFormat(f string) error {
	switch f {
	case "", ResultsSummary, ResultsSeed:
		return nil
	}
	return fmt.Errorf("results format %q: want %s or %s", f, ResultsSummary, ResultsSeed)
}

// SeedRecord is one episode in the ResultsSeed format: the summary record
// with the trajectory's steps and test results, and the episode result
// with the seed's own field names beside ours.
type SeedRecord struct {
	Record
	Steps       []gym.TrajectoryStep `json:"steps"`
	TestResults []gym.TestCommand    `json:"test_results"`
	// Metadata is the seed's trajectory metadata: its episode_id (our
	// trajectory id), with our task id and episode index.
	Metadata map[string]any `json:"metadata"`
	// EpisodeResult shadows Record's in JSON: a field of the outer struct
	// wins over one of an embedded struct.
	EpisodeResult SeedEpisodeResult `json:"episode_result"`
}

// SeedEpisodeResult is gym.EpisodeResult with the seed's EpisodeResult
// fields added: environment_id, total_actions, duration (seconds),
// test_results and token_usage.
type SeedEpisodeResult struct {
	gym.EpisodeResult
	EnvironmentID string            `json:"environment_id"`
	TotalActions  int               `json:"total_actions"`
	Duration      float64           `json:"duration"`
	TestResults   []gym.TestCommand `json:"test_results"`
	TokenUsage    SeedTokenUsage    `json:"token_usage"`
}

// SeedTokenUsage is the seed's per-episode token_usage.
type SeedTokenUsage struct {
	TotalInputTokens  int `json:"total_input_tokens"`
	TotalOutputTokens int `json:"total_output_tokens"`
	// TotalCost is the estimated cost in USD (Options.Cost), 0 without a
	// price.
	TotalCost float64 `json:"total_cost"`
	// APICalls counts the calls made; CacheHits the answers served from
	// the response cache, CacheMisses the calls made while it was on.
	APICalls     int     `json:"api_calls"`
	CacheHits    int     `json:"cache_hits"`
	CacheMisses  int     `json:"cache_misses"`
	CacheHitRate float64 `json:"cache_hit_rate"`
}

// seedUsage converts usage to the seed's names.
func seedUsage(u gym.Usage, cost func(gym.Usage) float64) SeedTokenUsage {
	s := SeedTokenUsage{
		TotalInputTokens:  u.PromptTokens,
		TotalOutputTokens: u.CompletionTokens,
		APICalls:          u.Calls,
		CacheHits:         u.CachedCalls,
	}
	if u.CachedCalls > 0 {
		s.CacheMisses = u.Calls
		s.CacheHitRate = float64(u.CachedCalls) / float64(u.CachedCalls+u.Calls)
	}
	if cost != nil {
		s.TotalCost = cost(u)
	}
	return s
}

// seedRecordOf makes the seed-format record of a trajectory.
func seedRecordOf(rec Record, t *gym.Trajectory, cost func(gym.Usage) float64) *SeedRecord {
	tests := t.TestResults
	if tests == nil {
		tests = []gym.TestCommand{}
	}
	steps := t.Steps
	if steps == nil {
		steps = []gym.TrajectoryStep{}
	}
	return &SeedRecord{
		Record:      rec,
		Steps:       steps,
		TestResults: tests,
		Metadata:    map[string]any{"episode_id": t.TrajectoryID, "task_id": t.TaskID, "episode": t.Episode},
		EpisodeResult: SeedEpisodeResult{
			EpisodeResult: t.EpisodeResult,
			EnvironmentID: t.EnvironmentID,
			TotalActions:  t.EpisodeResult.Actions,
			Duration:      t.EpisodeResult.DurationSeconds,
			TestResults:   tests,
			TokenUsage:    seedUsage(t.Usage, cost),
		},
	}
}
