package testresult

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
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
// <testsuite> and returns one case per <testcase>, in document order. A
// report is one document: anything but white space, comments and
// processing instructions before or after the root element is an
// *ExtraContentError (two reports written to one stream, or a report
// with something appended to it).
func ParseJUnit(data []byte) ([]gym.TestCase, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("junit: empty report")
	}
	var root struct {
		XMLName xml.Name
		junitSuite
	}
	start, err := prologEnd(data)
	if err != nil {
		return nil, err
	}
	dec := xml.NewDecoder(bytes.NewReader(data[start:]))
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("junit: %w", err)
	}
	if err := expectEnd(dec, start); err != nil {
		return nil, err
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

// ExtraContentError is a JUnit report with something before or after its
// root element.
type ExtraContentError struct {
	// Offset is where the extra content starts.
	Offset int64
	What   string
}

func (e *ExtraContentError) Error() string {
	return fmt.Sprintf("junit: %s at byte %d", e.What, e.Offset)
}

// prologEnd returns the offset of the root element, checking that only
// an XML declaration, white space and comments come before it.
func prologEnd(data []byte) (int64, error) {
	dec := xml.NewDecoder(bytes.NewReader(data))
	for {
		off := dec.InputOffset()
		tok, err := dec.RawToken()
		if err != nil {
			return 0, fmt.Errorf("junit: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			return off, nil
		case xml.CharData:
			if len(bytes.TrimSpace(t)) > 0 {
				return 0, &ExtraContentError{Offset: off, What: "text before the root element"}
			}
		case xml.EndElement:
			return 0, &ExtraContentError{Offset: off, What: "an end tag before the root element"}
		}
	}
}

// expectEnd checks that nothing but white space, comments and processing
// instructions follows the root element.
func expectEnd(dec *xml.Decoder, base int64) error {
	for {
		off := base + dec.InputOffset()
		tok, err := dec.RawToken()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return &ExtraContentError{Offset: off, What: "unreadable content after the root element (" + err.Error() + ")"}
		}
		switch t := tok.(type) {
		case xml.CharData:
			if len(bytes.TrimSpace(t)) > 0 {
				return &ExtraContentError{Offset: off, What: "text after the root element"}
			}
		case xml.Comment:
		case xml.ProcInst:
			return &ExtraContentError{Offset: off, What: "a second XML declaration after the root element"}
		default:
			return &ExtraContentError{Offset: off, What: "markup after the root element"}
		}
	}
}

// summaryLine matches pytest's final line, "=== 3 failed, 7 passed in
// 0.12s ===" (or, with -q, the same without the rules).
var summaryLine = regexp.MustCompile(`^=*\s*((?:\d+ [a-z]+,? ?)+)in [\d.]+s`)

// summaryCount matches one "N outcome" of a summary line.
var summaryCount = regexp.MustCompile(`(\d+) ([a-z]+)`)

// SummaryPassed reads pytest's own final summary line in output and returns
// how many tests it says passed (xpassed included: JUnit reports those as
// passes). ok is false when output has no summary line.
func SummaryPassed(output string) (passed int, ok bool) {
	lines := strings.Split(strings.ReplaceAll(output, "\r\n", "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		m := summaryLine.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		for _, c := range summaryCount.FindAllStringSubmatch(m[1], -1) {
			if c[2] == "passed" || c[2] == "xpassed" {
				n, _ := strconv.Atoi(c[1])
				passed += n
			}
		}
		return passed, true
	}
	return 0, false
}
