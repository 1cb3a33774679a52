package testresult

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/gymserver/gymserver/gym"
)

// rank orders statuses from best to worst; when a test case is reported
// twice (a pass, then an error in its teardown) the worst one stands.
var rank = map[string]int{gym.TestSkipped: 0, gym.TestPassed: 1, gym.TestFailed: 2, gym.TestError: 3}

// junitSuite is a <testsuite> or <testsuites> element; suites nest.
type junitSuite struct {
	Suites []junitSuite `xml:"testsuite"`
	Cases  []junitCase  `xml:"testcase"`
}

type junitCase struct {
	Name      string         `xml:"name,attr"`
	ClassName string         `xml:"classname,attr"`
	Failures  []junitMessage `xml:"failure"`
	Errors    []junitMessage `xml:"error"`
	Skipped   []junitMessage `xml:"skipped"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// ParseJUnit reads a JUnit XML report whose root is <testsuites> or
// <testsuite> and returns one case per <testcase>, in document order.
func ParseJUnit(data []byte) ([]gym.TestCase, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("junit: empty report")
	}
	var root struct {
		XMLName xml.Name
		junitSuite
	}
	if err := xml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("junit: %w", err)
	}
	if root.XMLName.Local != "testsuites" && root.XMLName.Local != "testsuite" {
		return nil, fmt.Errorf("junit: root element is <%s>, want <testsuites> or <testsuite>", root.XMLName.Local)
	}
	var cases caseList
	var walk func(s junitSuite)
	walk = func(s junitSuite) {
		for _, c := range s.Cases {
			tc := gym.TestCase{Name: junitName(c), Status: gym.TestPassed}
			switch {
			case len(c.Errors) > 0:
				tc.Status, tc.Message = gym.TestError, message(c.Errors[0])
			case len(c.Failures) > 0:
				tc.Status, tc.Message = gym.TestFailed, message(c.Failures[0])
			case len(c.Skipped) > 0:
				tc.Status, tc.Message = gym.TestSkipped, message(c.Skipped[0])
			}
			cases.add(tc)
		}
		for _, sub := range s.Suites {
			walk(sub)
		}
	}
	walk(root.junitSuite)
	return cases.list, nil
}

// junitName joins classname and name the way pytest prints node ids when
// the classname is a dotted module path.
func junitName(c junitCase) string {
	switch {
	case c.ClassName == "":
		return c.Name
	case c.Name == "":
		return c.ClassName
	}
	return c.ClassName + "::" + c.Name
}

// message returns a one-line failure message: the attribute, else the
// first line of the element's text.
func message(m junitMessage) string {
	s := strings.TrimSpace(m.Message)
	if s == "" {
		s = strings.TrimSpace(m.Text)
	}
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	const max = 500
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

// pytestLine matches a pytest -rA short summary line:
// "PASSED tests/test_x.py::test_a" or "FAILED tests/test_x.py::test_b - AssertionError".
var pytestLine = regexp.MustCompile(`^(PASSED|FAILED|ERROR|XFAIL|XPASS) (\S+)(?: - (.*))?$`)

// pytestSkip matches "SKIPPED [1] tests/test_x.py:10: reason".
var pytestSkip = regexp.MustCompile(`^SKIPPED \[\d+\] (\S+?):?\d*: ?(.*)$`)

// ParsePytest reads the short test summary of pytest run with -rA. It
// reads only the lines after the "short test summary info" header when the
// output has one, so test output that happens to start with PASSED cannot
// add cases.
func ParsePytest(output string) []gym.TestCase {
	lines := strings.Split(strings.ReplaceAll(output, "\r\n", "\n"), "\n")
	start := -1
	for i, l := range lines {
		if strings.Contains(l, "short test summary info") && strings.HasPrefix(l, "=") {
			start = i + 1
		}
	}
	if start < 0 {
		return nil
	}
	var cases caseList
	for _, l := range lines[start:] {
		l = strings.TrimRight(l, " ")
		if strings.HasPrefix(l, "=") {
			break // the final "=== 3 passed in 0.1s ===" line
		}
		if m := pytestLine.FindStringSubmatch(l); m != nil {
			status := map[string]string{"PASSED": gym.TestPassed, "FAILED": gym.TestFailed, "ERROR": gym.TestError,
				"XFAIL": gym.TestSkipped, "XPASS": gym.TestPassed}[m[1]]
			cases.add(gym.TestCase{Name: m[2], Status: status, Message: m[3]})
			continue
		}
		if m := pytestSkip.FindStringSubmatch(l); m != nil {
			cases.add(gym.TestCase{Name: m[1], Status: gym.TestSkipped, Message: m[2]})
		}
	}
	return cases.list
}

// caseList keeps cases in first-seen order, one per name, worst status wins.
type caseList struct {
	list []gym.TestCase
	at   map[string]int
}

func (c *caseList) add(tc gym.TestCase) {
	if c.at == nil {
		c.at = map[string]int{}
	}
	if i, ok := c.at[tc.Name]; ok {
		if rank[tc.Status] > rank[c.list[i].Status] {
			c.list[i] = tc
		}
		return
	}
	c.at[tc.Name] = len(c.list)
	c.list = append(c.list, tc)
}

// Summarize counts cases by status.
func Summarize(cases []gym.TestCase) (passed, failed, errored, skipped int) {
	for _, c := range cases {
		switch c.Status {
		case gym.TestPassed:
			passed++
		case gym.TestFailed:
			failed++
		case gym.TestError:
			errored++
		case gym.TestSkipped:
			skipped++
		}
	}
	return passed, failed, errored, skipped
}
