// Package goldentest compares test output with golden files in testdata,
// and rewrites them when the test runs with -update.
package goldentest

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// update is the -update flag of every test binary that imports the package.
var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// Check compares got with the golden file at path; with -update it writes
// got there instead (creating its folder).
func Check(tb testing.TB, path string, got []byte) {
	tb.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			tb.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		tb.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}
