package executor

import (
	"slices"
	"testing"
)

// TestPlainPytest checks which command lines count as a plain pytest
// invocation: only those the shell would run word for word.
func TestPlainPytest(t *testing.T) {
	for _, tc := range []struct {
		line   string
		prog   string
		module bool
		args   []string
		ok     bool
	}{
		{line: "pytest", prog: "pytest", ok: true},
		{line: "pytest tests/", prog: "pytest", args: []string{"tests/"}, ok: true},
		{line: "  python3 -m pytest\t-q tests/test_a.py::test_b -k=x ", prog: "python3", module: true,
			args: []string{"-q", "tests/test_a.py::test_b", "-k=x"}, ok: true},
		{line: "python -m pytest --maxfail=1 -p no:cacheprovider", prog: "python", module: true,
			args: []string{"--maxfail=1", "-p", "no:cacheprovider"}, ok: true},
		{line: "python3 -m pytest", prog: "python3", module: true, ok: true},
		{line: ""},
		{line: "python3 -m"},
		{line: "python3 pytest"},
		{line: "python3 -m pytest_cov"},
		{line: "/usr/bin/pytest tests"},
		{line: "py.test tests"},
		{line: "pytest 'tests'"},
		{line: `pytest "tests"`},
		{line: `pytest tests\ x`},
		{line: "pytest tests/*.py"},
		{line: "pytest tests/test_[ab].py"},
		{line: "pytest tests/test_?.py"},
		{line: "pytest ~/tests"},
		{line: "pytest $TESTS"},
		{line: "pytest `ls`"},
		{line: "pytest tests; rm -rf /"},
		{line: "pytest tests && true"},
		{line: "pytest tests | tee log"},
		{line: "pytest tests > log"},
		{line: "pytest tests &"},
		{line: "pytest tests\ntrue"},
		{line: "pytest tests # comment"},
		{line: "pytest {a,b}"},
		{line: "pytest (tests)"},
		{line: "PYTHONPATH=. pytest tests"},
		{line: "cd x && pytest"},
		{line: "pytest tests/é"},
	} {
		prog, module, args, ok := plainPytest(tc.line)
		if ok != tc.ok || prog != tc.prog || module != tc.module || !slices.Equal(args, tc.args) {
			t.Errorf("plainPytest(%q) = %q %v %q %v, want %q %v %q %v", tc.line, prog, module, args, ok, tc.prog, tc.module, tc.args, tc.ok)
		}
	}
}
