package config_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/internal/goldentest"
)

// golden compares got with testdata/NAME.golden, rewriting it with -update.
// Absolute paths of the testdata directory read as $TESTDATA.
func golden(t *testing.T, name, got string) {
	t.Helper()
	dir, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	got = strings.ReplaceAll(got, dir, "$TESTDATA")
	goldentest.Check(t, filepath.Join("testdata", name+".golden"), []byte(got))
}

func TestGoodConfigs(t *testing.T) {
	files, _ := filepath.Glob("testdata/good/*.json")
	if len(files) == 0 {
		t.Fatal("no good configs")
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Load(f)
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			out, err := json.MarshalIndent(struct {
				Config   *config.Config
				Warnings []string
			}{cfg, cfg.Warnings}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "good/"+name, string(out)+"\n")
		})
	}
}

func TestBadConfigs(t *testing.T) {
	files, _ := filepath.Glob("testdata/bad/*.json")
	if len(files) == 0 {
		t.Fatal("no bad configs")
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Load(f)
			if err == nil {
				t.Fatalf("loaded %+v, want an error", cfg)
			}
			golden(t, "bad/"+name, err.Error()+"\n")
		})
	}
}

// TestAllProblemsReported checks that one load names every unknown key,
// not just the first.
func TestAllProblemsReported(t *testing.T) {
	_, err := config.Load("testdata/bad/unknown_keys.json")
	if err == nil {
		t.Fatal("no error")
	}
	for _, path := range []string{
		"environments[0].unit_test: unknown key (did you mean \"unit_tests\"?)",
		"environments[0].timeout_config.global_timout: unknown key",
		"environments[0].reward.bonus: unknown key",
		"rollout_config.max_parallel: unknown key",
		"episode_control_config.extra: unknown key",
		"llm: unknown key",
		"plugins[0].options: unknown key",
	} {
		if !strings.Contains(err.Error(), path) {
			t.Errorf("error does not name %q:\n%v", path, err)
		}
	}
}

func TestDefaultsAndInheritance(t *testing.T) {
	cfg, err := config.Load("testdata/good/seed_full.json")
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Environments[0]
	// The environment's timeout_config overrides the root's field by field.
	if e.Timeouts.Global.Seconds() != 600 || e.Timeouts.Command.Seconds() != 30 || e.Timeouts.Test.Seconds() != 120 {
		t.Errorf("timeouts %+v", e.Timeouts)
	}
	if e.MaxActions != config.DefaultMaxActions || e.Network != "none" || e.Reward.Mode != config.RewardPassRate {
		t.Errorf("defaults not applied: %+v", e)
	}
	if got := cfg.EpisodeControl.EpisodesFor(1); got != 1 {
		t.Errorf("episodes per env %d", got)
	}
}

func TestEpisodesFor(t *testing.T) {
	two := 2
	tests := []struct {
		name  string
		ctl   config.EpisodeControl
		tasks int
		want  int
	}{
		{"max_episodes per one-task env", config.EpisodeControl{MaxEpisodes: 3}, 1, 3},
		{"max_episodes spread over tasks", config.EpisodeControl{MaxEpisodes: 3}, 10, 3},
		{"episodes_per_task", config.EpisodeControl{MaxEpisodes: 3, EpisodesPerTask: 2}, 10, 20},
		{"max_episodes_per_env caps max_episodes", config.EpisodeControl{MaxEpisodes: 3, MaxEpisodesPerEnv: &two}, 1, 2},
		{"max_episodes_per_env caps episodes_per_task", config.EpisodeControl{EpisodesPerTask: 2, MaxEpisodesPerEnv: &two}, 10, 2},
		{"no task", config.EpisodeControl{MaxEpisodes: 3, EpisodesPerTask: 2}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.ctl.EpisodesFor(tt.tasks); got != tt.want {
				t.Errorf("EpisodesFor(%d) = %d, want %d", tt.tasks, got, tt.want)
			}
		})
	}
}

func TestDeprecatedRootFields(t *testing.T) {
	cfg, err := config.Load("testdata/good/deprecated_root.json")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LLM.Model != "openai/gpt-4o" || cfg.EpisodeControl.MaxEpisodes != 3 || !cfg.EpisodeControl.StopOnSuccess ||
		cfg.Timeouts.Global.Seconds() != 60 || cfg.Rollout.TrajectoryOutputPath != "out/trajectories" || cfg.Rollout.EnablePlugins {
		t.Errorf("deprecated fields not honoured: %+v", cfg)
	}
	// The section wins over the deprecated root field.
	if cfg.Rollout.MaxParallelRollouts != 8 {
		t.Errorf("max_parallel_rollouts %d, want the section's 8", cfg.Rollout.MaxParallelRollouts)
	}
	if len(cfg.Warnings) != 7 {
		t.Errorf("warnings %q, want 7", cfg.Warnings)
	}
}

func TestCopySpecFiles(t *testing.T) {
	cfg, err := config.Load("testdata/good/additive.json")
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Environments[0]
	var got []string
	for _, c := range append(e.CopyFolders, e.HiddenTests...) {
		files, err := c.Files()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			got = append(got, f.Path+" "+strings.TrimSpace(string(f.Data)))
		}
	}
	want := []string{
		`/workspace/starter/main.py print("hi")`,
		`/workspace/extra/main.py print("solved")`,
		`/workspace/tests/test_x.py def test_x(): pass`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}

// TestServicesRefusedForHarborTasks checks that an environment whose tasks
// include Harbor tasks cannot declare services: their test.sh starts what
// it needs, and the Harbor verifier never starts services.
func TestServicesRefusedForHarborTasks(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "..", "examples", "harbor"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = config.Parse([]byte(`{"environments": [{"id": "h", "docker_image": "img", "tasks_dir": "tasks",
		"services": [{"name": "api", "command": "python3 app.py", "port": 8000}]}]}`), dir)
	if err == nil || !strings.Contains(err.Error(), "environments[0].services: task ") || !strings.Contains(err.Error(), "is a Harbor task") {
		t.Fatalf("err = %v, want services refused for a Harbor task", err)
	}
}
