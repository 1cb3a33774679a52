package testresult

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gymserver/gymserver/gym"
)

// ctrfReport is a Common Test Report Format (ctrf.io) document; only the
// fields we read.
type ctrfReport struct {
	Results *struct {
		Tests *[]ctrfTest `json:"tests"`
	} `json:"results"`
}

type ctrfTest struct {
	Name    string `json:"name"`
	Status  string `json:"status"`
	Message string `json:"message"`
	Trace   string `json:"trace"`
}

// ctrfStatus maps CTRF's statuses to ours: pending (not run yet) counts
// as skipped, and "other" as an error, so that nothing unknown is a pass.
var ctrfStatus = map[string]string{
	"passed":  gym.TestPassed,
	"failed":  gym.TestFailed,
	"skipped": gym.TestSkipped,
	"pending": gym.TestSkipped,
	"other":   gym.TestError,
}

// ParseCTRF reads a CTRF JSON report ({"results": {"tool": ...,
// "summary": ..., "tests": [...]}}) and returns one case per test, in
// report order; a name reported twice keeps its worst status. A status
// outside CTRF's five is an error case whose message names the status.
func ParseCTRF(data []byte) ([]gym.TestCase, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("ctrf: empty report")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var r ctrfReport
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("ctrf: %w", err)
	}
	if dec.More() {
		return nil, errors.New("ctrf: more than one JSON value")
	}
	if r.Results == nil {
		return nil, errors.New(`ctrf: no "results" object`)
	}
	if r.Results.Tests == nil {
		return nil, errors.New(`ctrf: no "results.tests" array`)
	}
	var cases caseList
	for i, t := range *r.Results.Tests {
		if t.Name == "" {
			return nil, fmt.Errorf("ctrf: test %d has no name", i)
		}
		status, ok := ctrfStatus[t.Status]
		msg := t.Message
		if msg == "" {
			msg = t.Trace
		}
		if !ok {
			status, msg = gym.TestError, fmt.Sprintf("unknown ctrf status %q", t.Status)
		}
		if status == gym.TestPassed {
			msg = ""
		}
		cases.add(gym.TestCase{Name: t.Name, Status: status, Message: message(junitMessage{Text: msg})})
	}
	return cases.list, nil
}
