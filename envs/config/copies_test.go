//go:build unix

package config_test

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/envs/config"
)

// tree makes files (path → content) in dir; a content starting with "->"
// makes a symlink to the rest instead, and "fifo" a named pipe.
func tree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names) // parents before their children
	for _, name := range names {
		content := files[name]
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case strings.HasSuffix(name, "/"):
			err = os.MkdirAll(p, 0o755)
		case strings.HasPrefix(content, "->"):
			err = os.Symlink(strings.TrimPrefix(content, "->"), p)
		case content == "fifo":
			err = syscall.Mkfifo(p, 0o644)
		default:
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// loadEnv loads a config in dir with one environment that has the
// required fields and extra, a fragment of JSON fields.
func loadEnv(t *testing.T, dir, extra string) (*config.Config, error) {
	t.Helper()
	path := filepath.Join(dir, "config.json")
	data := `{"environments": [{"id": "t", "docker_image": "img", "unit_tests": ["pytest"], "prompt": "p", ` + extra + `}]}`
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return config.Load(path)
}

func TestCopySymlinks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		files  map[string]string
		hidden string // the hidden_tests entry
		// want are the copied files ("path content"), or wantErr a part
		// of the load error; $DIR is the temporary directory.
		want    []string
		wantErr string
	}{
		{
			name:   "link_to_dir",
			files:  map[string]string{"real/test_a.py": "a", "tests": "->real"},
			hidden: `"tests"`,
			want:   []string{"/workspace/tests/test_a.py a"},
		},
		{
			name:   "link_to_file",
			files:  map[string]string{"real/test_a.py": "a", "test_b.py": "->real/test_a.py"},
			hidden: `{"src": "test_b.py", "dest": "/workspace/t/test_b.py"}`,
			want:   []string{"/workspace/t/test_b.py a"},
		},
		{
			name: "links_inside_dir",
			files: map[string]string{
				"shared/conftest.py": "c", "shared/data/x.txt": "x",
				"tests/test_a.py": "a", "tests/conftest.py": "->../shared/conftest.py", "tests/data": "->../shared/data",
			},
			hidden: `"tests"`,
			want:   []string{"/workspace/tests/conftest.py c", "/workspace/tests/data/x.txt x", "/workspace/tests/test_a.py a"},
		},
		{
			name:   "absolute_link",
			files:  map[string]string{"real/test_a.py": "a", "tests/sub": "->$DIR/real"},
			hidden: `"tests"`,
			want:   []string{"/workspace/tests/sub/test_a.py a"},
		},
		{
			name:   "skipped_dirs_and_links_to_them",
			files:  map[string]string{"tests/test_a.py": "a", "tests/__pycache__/a.pyc": "x", "tests/.git": "->../cache", "cache/x": "x"},
			hidden: `"tests"`,
			want:   []string{"/workspace/tests/test_a.py a"},
		},
		{
			name:    "dangling_src",
			files:   map[string]string{"tests": "->gone"},
			hidden:  `"tests"`,
			wantErr: `environments[0].hidden_tests[0].src: $DIR/tests: dangling symlink to "gone"`,
		},
		{
			name:    "dangling_inside",
			files:   map[string]string{"tests/test_a.py": "a", "tests/test_b.py": "->../nowhere/test_b.py"},
			hidden:  `{"src": "tests", "dest": "/workspace/tests"}`,
			wantErr: `environments[0].hidden_tests[0].src: $DIR/tests/test_b.py: dangling symlink to "../nowhere/test_b.py"`,
		},
		{
			name:    "loop_to_parent",
			files:   map[string]string{"tests/test_a.py": "a", "tests/sub/up": "->.."},
			hidden:  `"tests"`,
			wantErr: `environments[0].hidden_tests[0].src: $DIR/tests/sub/up: symlink loop: it leads back to a folder above it`,
		},
		{
			// The link leaves the source for the folder above it, whose
			// walk comes back to the source.
			name:    "loop_through_parent_of_src",
			files:   map[string]string{"tests/test_a.py": "a", "tests/sub/up": "->../.."},
			hidden:  `"tests"`,
			wantErr: `environments[0].hidden_tests[0].src: $DIR/tests/sub/up/tests: symlink loop`,
		},
		{
			name:    "loop_of_links",
			files:   map[string]string{"tests/test_a.py": "a", "tests/a": "->b", "tests/b": "->a"},
			hidden:  `"tests"`,
			wantErr: `environments[0].hidden_tests[0].src: $DIR/tests/a: symlink loop (it points to "b")`,
		},
		{
			name:    "fifo",
			files:   map[string]string{"tests/test_a.py": "a", "tests/pipe": "fifo"},
			hidden:  `"tests"`,
			wantErr: `environments[0].hidden_tests[0].src: $DIR/tests/pipe: a FIFO: only regular files, folders and symlinks to them can be copied`,
		},
		{
			name:    "link_to_fifo",
			files:   map[string]string{"pipe": "fifo", "tests/test_a.py": "a", "tests/p": "->../pipe"},
			hidden:  `"tests"`,
			wantErr: `environments[0].hidden_tests[0].src: $DIR/tests/p: a FIFO`,
		},
		{
			name:    "empty_dir",
			files:   map[string]string{"tests/": ""},
			hidden:  `"tests"`,
			wantErr: `environments[0].hidden_tests[0].src: $DIR/tests: no files to copy`,
		},
		{
			name:    "only_skipped_dirs",
			files:   map[string]string{"tests/__pycache__/a.pyc": "x"},
			hidden:  `"tests"`,
			wantErr: `environments[0].hidden_tests[0].src: $DIR/tests: no files to copy`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tc.files {
				tc.files[name] = strings.ReplaceAll(content, "$DIR", dir)
			}
			tree(t, dir, tc.files)
			cfg, err := loadEnv(t, dir, `"hidden_tests": [`+tc.hidden+`]`)
			if tc.wantErr != "" {
				want := strings.ReplaceAll(tc.wantErr, "$DIR", dir)
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("error %v, want one containing %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range cfg.Environments[0].HiddenTests {
				files, err := c.Files()
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range files {
					got = append(got, f.Path+" "+string(f.Data))
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCopyFilesRecheck checks that Files, run after loading, reports a
// source that went bad since instead of copying less.
func TestCopyFilesRecheck(t *testing.T) {
	dir := t.TempDir()
	tree(t, dir, map[string]string{"tests/test_a.py": "a"})
	cfg, err := loadEnv(t, dir, `"hidden_tests": ["tests"]`)
	if err != nil {
		t.Fatal(err)
	}
	tree(t, dir, map[string]string{"tests/test_b.py": "->gone"})
	_, err = cfg.Environments[0].HiddenTests[0].Files()
	if want := `dangling symlink to "gone"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want one containing %q", err, want)
	}
}

func TestDestinations(t *testing.T) {
	files := map[string]string{
		"starter/main.py":             "s",
		"starter_tests/tests/test.py": "s",
		"starter_tests/main.py":       "s",
		"tests/test_x.py":             "t",
		"tests2/test_y.py":            "t",
		"solution/main.py":            "r",
		"solution_tree/main.py":       "r",
		"solution_tree/tests/x.py":    "r",
	}
	for _, tc := range []struct {
		name   string
		fields string // JSON fields of the environment
		// wantErr is a part of the load error; "" means it loads.
		wantErr string
	}{
		{
			name: "examples_shape",
			fields: `"copy_folders": [{"src": "starter", "dest": "/workspace"}],
				"hidden_tests": [{"src": "tests", "dest": "/workspace/tests"}],
				"reference_solution": {"files": [{"src": "solution/main.py", "dest": "/workspace/main.py"}]}`,
		},
		{
			name:   "outside_workdir",
			fields: `"hidden_tests": [{"src": "tests", "dest": "/opt/task_tests"}, {"src": "tests2", "dest": "/workspace/tests2"}]`,
		},
		{
			name:    "workdir",
			fields:  `"hidden_tests": [{"src": "tests", "dest": "/workspace"}]`,
			wantErr: `environments[0].hidden_tests[0].dest: "/workspace" is the working_directory`,
		},
		{
			name:    "workdir_relative",
			fields:  `"working_directory": "/srv/app", "hidden_tests": [{"src": "tests", "dest": "."}]`,
			wantErr: `environments[0].hidden_tests[0].dest: "/srv/app" is the working_directory`,
		},
		{
			name:    "contains_workdir",
			fields:  `"working_directory": "/workspace/app", "hidden_tests": [{"src": "tests", "dest": "/workspace"}]`,
			wantErr: `environments[0].hidden_tests[0].dest: "/workspace" contains the working_directory "/workspace/app"`,
		},
		{
			name: "equal_to_copy",
			fields: `"copy_folders": [{"src": "starter", "dest": "/workspace/tests"}],
				"hidden_tests": [{"src": "tests", "dest": "/workspace/tests"}]`,
			wantErr: `environments[0].hidden_tests[0].dest: "/workspace/tests" overlaps environments[0].copy_folders[0].dest "/workspace/tests"`,
		},
		{
			name: "copy_inside",
			fields: `"copy_folders": ["starter", {"src": "starter", "dest": "tests/fixtures"}],
				"hidden_tests": [{"src": "tests", "dest": "/workspace/tests"}]`,
			wantErr: `environments[0].hidden_tests[0].dest: "/workspace/tests" overlaps environments[0].copy_folders[1].dest "/workspace/tests/fixtures"`,
		},
		{
			name: "copy_above_with_files_inside",
			fields: `"copy_folders": [{"src": "starter_tests", "dest": "/workspace"}],
				"hidden_tests": [{"src": "tests", "dest": "/workspace/tests"}]`,
			wantErr: `environments[0].hidden_tests[0].dest: "/workspace/tests" overlaps environments[0].copy_folders[0].dest, which copies /workspace/tests/test.py there`,
		},
		{
			name: "bare_copy_equal",
			fields: `"copy_folders": ["tests"],
				"hidden_tests": [{"src": "tests2", "dest": "/workspace/tests"}]`,
			wantErr: `environments[0].hidden_tests[0].dest: "/workspace/tests" overlaps environments[0].copy_folders[0].dest "/workspace/tests"`,
		},
		{
			name:    "root",
			fields:  `"hidden_tests": [{"src": "tests", "dest": "/"}]`,
			wantErr: `environments[0].hidden_tests[0].dest: must not be /`,
		},
		{
			name:    "root_file",
			fields:  `"hidden_tests": [{"src": "tests/test_x.py", "dest": "/"}]`,
			wantErr: `environments[0].hidden_tests[0].dest: "/": a file there would replace the working_directory "/workspace"`,
		},
		{
			name:    "usr",
			fields:  `"hidden_tests": [{"src": "tests", "dest": "/usr"}]`,
			wantErr: `environments[0].hidden_tests[0].dest: "/usr" contains the system folder /usr`,
		},
		{
			name:    "usr_local",
			fields:  `"hidden_tests": [{"src": "tests", "dest": "/usr/local/"}]`,
			wantErr: `environments[0].hidden_tests[0].dest: "/usr/local" contains the system folder /usr/local`,
		},
		{
			name:    "tmp",
			fields:  `"hidden_tests": [{"src": "tests", "dest": "/tmp"}]`,
			wantErr: `environments[0].hidden_tests[0].dest: "/tmp" contains the system folder /tmp`,
		},
		{
			name:    "etc_dotdot",
			fields:  `"hidden_tests": [{"src": "tests", "dest": "../etc"}]`,
			wantErr: `environments[0].hidden_tests[0].dest: "/etc" contains the system folder /etc`,
		},
		{
			name:    "inside_proc",
			fields:  `"hidden_tests": [{"src": "tests", "dest": "/proc/tests"}]`,
			wantErr: `environments[0].hidden_tests[0].dest: "/proc/tests" is inside /proc, which is not for task files`,
		},
		{
			name:    "inside_gymserver",
			fields:  `"hidden_tests": [{"src": "tests", "dest": "/.gymserver/tests"}]`,
			wantErr: `environments[0].hidden_tests[0].dest: "/.gymserver/tests" is inside /.gymserver`,
		},
		{
			name:    "two_equal",
			fields:  `"hidden_tests": [{"src": "tests", "dest": "/workspace/tests"}, {"src": "tests2", "dest": "/workspace/tests"}]`,
			wantErr: `environments[0].hidden_tests[1].dest: "/workspace/tests" overlaps environments[0].hidden_tests[0].dest "/workspace/tests"`,
		},
		{
			name:    "one_inside_another",
			fields:  `"hidden_tests": [{"src": "tests", "dest": "/workspace/tests/unit"}, {"src": "tests2", "dest": "/workspace/tests"}]`,
			wantErr: `environments[0].hidden_tests[1].dest: "/workspace/tests" overlaps environments[0].hidden_tests[0].dest "/workspace/tests/unit"`,
		},
		{
			name: "reference_file_in_hidden_root",
			fields: `"hidden_tests": [{"src": "tests", "dest": "/workspace/tests"}],
				"reference_solution": {"files": [{"src": "solution/main.py", "dest": "tests/main.py"}]}`,
			wantErr: `environments[0].reference_solution.files[0].dest: writes /workspace/tests/main.py inside environments[0].hidden_tests[0].dest "/workspace/tests"`,
		},
		{
			name: "reference_folder_into_hidden_root",
			fields: `"hidden_tests": [{"src": "tests", "dest": "/workspace/tests"}],
				"reference_solution": {"files": [{"src": "solution_tree", "dest": "/workspace"}]}`,
			wantErr: `environments[0].reference_solution.files[0].dest: writes /workspace/tests/x.py inside environments[0].hidden_tests[0].dest "/workspace/tests"`,
		},
		{
			name:    "reference_file_on_workdir",
			fields:  `"reference_solution": {"files": [{"src": "solution/main.py", "dest": "/workspace"}]}`,
			wantErr: `environments[0].reference_solution.files[0].dest: "/workspace": a file there would replace the working_directory "/workspace"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tree(t, dir, files)
			_, err := loadEnv(t, dir, tc.fields)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestExamplesLoad checks that the shipped examples pass every check.
func TestExamplesLoad(t *testing.T) {
	configs, _ := filepath.Glob("../../examples/*/config.json")
	if len(configs) < 2 {
		t.Fatalf("found %d example configs", len(configs))
	}
	for _, path := range configs {
		if _, err := config.Load(path); err != nil {
			t.Error(err)
		}
	}
}
