package testresult_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/envs/testresult"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/goldentest"
)

// render is the golden form of a parse: the cases, the counts and the error.
func render(t *testing.T, cases []gym.TestCase, err error) string {
	t.Helper()
	p, f, e, s := testresult.Summarize(cases)
	out := struct {
		Cases                           []gym.TestCase
		Passed, Failed, Errors, Skipped int
		Err                             string `json:",omitempty"`
	}{cases, p, f, e, s, ""}
	if err != nil {
		out.Err = err.Error()
	}
	b, merr := json.MarshalIndent(out, "", "  ")
	if merr != nil {
		t.Fatal(merr)
	}
	return string(b) + "\n"
}

func TestParseJUnitGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.xml")
	if len(files) < 4 {
		t.Fatalf("found %d junit files", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			cases, err := testresult.ParseJUnit(data)
			goldentest.Check(t, strings.TrimSuffix(f, ".xml")+".junit.golden", []byte(render(t, cases, err)))
		})
	}
}

func TestParsePytestGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) < 3 {
		t.Fatalf("found %d pytest outputs", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			goldentest.Check(t, strings.TrimSuffix(f, ".txt")+".pytest.golden", []byte(render(t, testresult.ParsePytest(string(data)), nil)))
		})
	}
}

// TestJUnitAndPytestAgree checks that the two parsers give the same
// verdicts for the same real pytest run.
func TestJUnitAndPytestAgree(t *testing.T) {
	for _, name := range []string{"pytest_calculator", "pytest_mixed", "pytest_collect_error"} {
		t.Run(name, func(t *testing.T) {
			xmlData, err := os.ReadFile("testdata/" + name + ".xml")
			if err != nil {
				t.Fatal(err)
			}
			text, err := os.ReadFile("testdata/" + name + ".txt")
			if err != nil {
				t.Fatal(err)
			}
			j, err := testresult.ParseJUnit(xmlData)
			if err != nil {
				t.Fatal(err)
			}
			p := testresult.ParsePytest(string(text))
			jp, jf, je, _ := testresult.Summarize(j)
			pp, pf, pe, _ := testresult.Summarize(p)
			if jp != pp || jf != pf || je != pe || jp+jf+je == 0 {
				t.Errorf("junit %d/%d/%d, pytest %d/%d/%d (passed/failed/errors)", jp, jf, je, pp, pf, pe)
			}
		})
	}
}

func TestParsePytestIgnoresLookalikes(t *testing.T) {
	// Lines before the summary header are test output, not verdicts.
	out := "PASSED tests/test_x.py::test_fake\n" +
		"=========================== short test summary info ============================\n" +
		"FAILED tests/test_x.py::test_real - assert 0\n" +
		"============================== 1 failed in 0.01s ===============================\n" +
		"PASSED tests/test_x.py::test_after\n"
	got := testresult.ParsePytest(out)
	want := []gym.TestCase{{Name: "tests/test_x.py::test_real", Status: gym.TestFailed, Message: "assert 0"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestParseCTRFGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.json")
	if len(files) < 5 {
		t.Fatalf("found %d ctrf files", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			cases, err := testresult.ParseCTRF(data)
			goldentest.Check(t, strings.TrimSuffix(f, ".json")+".ctrf.golden", []byte(render(t, cases, err)))
		})
	}
}

func TestParseCTRFErrors(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"empty", "  \n", "ctrf: empty report"},
		{"not_json", "PASSED", "ctrf: invalid character"},
		{"no_results", `{"tool": {}}`, `ctrf: no "results" object`},
		{"two_values", `{"results": {"tests": []}} {}`, "ctrf: more than one JSON value"},
		{"nameless", `{"results": {"tests": [{"status": "passed"}]}}`, "ctrf: test 0 has no name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cases, err := testresult.ParseCTRF([]byte(tc.data))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("got %v, %v; want an error starting %q", cases, err, tc.want)
			}
		})
	}
}
