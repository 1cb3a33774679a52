package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/internal/waittest"
	"github.com/gymserver/gymserver/policy/rollout"
)

// The browser tests load the dashboard and the viewer in Debian's headless
// Chromium (.ci/setup installs it), driven over the DevTools protocol, and
// check what it renders against the
// server's state and the results files. They fail when Chromium is
// missing, unless GYMSERVER_NO_BROWSER=1 says to skip them. Screenshots go
// to out/screenshots/ at the top of the repository (CI artifacts).

// screenshotDir is where the browser tests save their screenshots.
const screenshotDir = "out/screenshots"

// chromium returns the path of the Chromium binary.
func chromium(t *testing.T) string {
	t.Helper()
	if os.Getenv("GYMSERVER_NO_BROWSER") == "1" {
		t.Skip("GYMSERVER_NO_BROWSER=1")
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found (apt-get install chromium, as .ci/setup does; GYMSERVER_NO_BROWSER=1 skips the browser tests)")
	return ""
}

// browser is a headless Chromium driven over the DevTools protocol on
// one page: a live page (the dashboard's event stream never ends) can be
// loaded, waited on, read and photographed in real time.
type browser struct {
	t      *testing.T
	ws     *websocket.Conn
	nextID int
}

// startBrowser starts headless Chromium (bin) with a fresh profile and
// connects to its page; it is stopped when the test ends.
func startBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--no-first-run", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
		"--user-data-dir="+t.TempDir(), "--window-size=1280,1400", "about:blank")
	// Chromium's helper processes write to the profile too: the whole
	// process group goes, so none writes while the profile is removed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		listening := regexp.MustCompile(`DevTools listening on ws://([^/]+)/`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	var hostPort string
	select {
	case hostPort = <-found:
	case <-time.After(time.Minute):
		t.Fatal("chromium did not print its DevTools address")
	}
	// The page target's own endpoint: no session ids needed.
	var targets []struct {
		Type, WebSocketDebuggerURL string
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + hostPort + "/json/list")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&targets)
			resp.Body.Close()
		}
		if err == nil && slices.ContainsFunc(targets, func(tg struct{ Type, WebSocketDebuggerURL string }) bool { return tg.Type == "page" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chromium has no page target: %v %+v", err, targets)
		}
		time.Sleep(100 * time.Millisecond)
	}
	i := slices.IndexFunc(targets, func(tg struct{ Type, WebSocketDebuggerURL string }) bool { return tg.Type == "page" })
	ws, _, err := websocket.DefaultDialer.Dial(targets[i].WebSocketDebuggerURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	b := &browser{t: t, ws: ws}
	b.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 1400, "deviceScaleFactor": 1, "mobile": false}, nil)
	return b
}

// call sends one DevTools command and decodes its result into result,
// skipping the events that come in between.
func (b *browser) call(method string, params map[string]any, result any) {
	b.t.Helper()
	b.nextID++
	id := b.nextID
	if err := b.ws.WriteJSON(map[string]any{"id": id, "method": method, "params": params}); err != nil {
		b.t.Fatalf("%s: %v", method, err)
	}
	b.ws.SetReadDeadline(time.Now().Add(time.Minute))
	for {
		var msg struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := b.ws.ReadJSON(&msg); err != nil {
			b.t.Fatalf("%s: %v", method, err)
		}
		if msg.ID != id {
			continue
		}
		if msg.Error != nil {
			b.t.Fatalf("%s: %s", method, msg.Error.Message)
		}
		if result != nil {
			if err := json.Unmarshal(msg.Result, result); err != nil {
				b.t.Fatalf("%s: %v", method, err)
			}
		}
		return
	}
}

// eval returns the value of a JavaScript expression in the page.
func (b *browser) eval(expr string) any {
	b.t.Helper()
	var r struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
		ExceptionDetails any `json:"exceptionDetails"`
	}
	b.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r)
	if r.ExceptionDetails != nil {
		b.t.Fatalf("%s: %v", expr, r.ExceptionDetails)
	}
	return r.Result.Value
}

// open loads url and waits until the expression ready is true in it.
func (b *browser) open(url, ready string) {
	b.t.Helper()
	b.call("Page.navigate", map[string]any{"url": url}, nil)
	// Until the new document is there, ready may throw.
	check := "(function () { try { return !!(" + ready + "); } catch (e) { return false; } })()"
	deadline := time.Now().Add(time.Minute)
	for b.eval(check) != true {
		if time.Now().After(deadline) {
			b.t.Fatalf("%s: not ready (%s) after a minute; the page: %.500s", url, ready, b.eval("document.documentElement.outerHTML"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dom returns the page's current DOM as HTML.
func (b *browser) dom() string {
	b.t.Helper()
	s, _ := b.eval("document.documentElement.outerHTML").(string)
	return s
}

// screenshot saves the page as out/screenshots/<name>.png: from the top,
// or from the element from (a CSS selector), to the end or for maxHeight
// pixels.
func (b *browser) screenshot(name, from string, maxHeight int) {
	b.t.Helper()
	y := 0.0
	if from != "" {
		y, _ = b.eval(`document.querySelector(` + strconv.Quote(from) + `).getBoundingClientRect().top + window.scrollY`).(float64)
	}
	height := min(b.eval("document.documentElement.scrollHeight").(float64)-y, float64(maxHeight))
	var r struct {
		Data string `json:"data"`
	}
	b.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": y, "width": 1280, "height": height, "scale": 1}}, &r)
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		b.t.Fatal(err)
	}
	if len(png) < 10_000 {
		b.t.Fatalf("screenshot %s: %d bytes; want a PNG of a rendered page", name, len(png))
	}
	if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	p, _ := filepath.Abs(filepath.Join(screenshotDir, name+".png"))
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", p)
}

// byID returns the text of the element with the given id in dom (an
// element without children).
func byID(t *testing.T, dom, id string) string {
	t.Helper()
	m := regexp.MustCompile(`id="` + regexp.QuoteMeta(id) + `"[^>]*>([^<]*)<`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the page has no element #%s", id)
	}
	return html.UnescapeString(m[1])
}

// cells returns the cell texts of the rows of the table with the given id.
func cells(t *testing.T, dom, id string) [][]string {
	t.Helper()
	start := strings.Index(dom, `id="`+id+`"`)
	if start < 0 {
		t.Fatalf("the page has no table #%s", id)
	}
	table := dom[start:]
	table = table[:strings.Index(table, "</table>")]
	var rows [][]string
	cell := regexp.MustCompile(`<td[^>]*>(.*?)</td>`)
	tags := regexp.MustCompile(`<[^>]+>`)
	for _, tr := range regexp.MustCompile(`(?s)<tr[^>]*>(.*?)</tr>`).FindAllStringSubmatch(table, -1) {
		var row []string
		for _, c := range cell.FindAllStringSubmatch(tr[1], -1) {
			row = append(row, html.UnescapeString(tags.ReplaceAllString(c[1], "")))
		}
		if row != nil {
			rows = append(rows, row)
		}
	}
	return rows
}

// oracleRollout runs `gymserver rollout` of the calculator environment
// with the oracle policy (its reference solution) and the extra flags,
// writing out.
func oracleRollout(t *testing.T, bin, out string, extra ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	args := append([]string{"rollout", calculatorConfig, "--policy", "oracle", "--output", out, "--quiet"}, extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "OPENROUTER_API_KEY=", "OPENAI_API_KEY=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("rollout: %v\n%s", err, b)
	}
}

// TestBrowserDashboard starts `serve --ui --token --warm-pool 2` with the
// calculator environment (Docker), runs a real oracle rollout through it
// (a cold reset), waits for the warm pool to fill and keeps one more
// session open (a reset from the pool), then loads the dashboard in
// headless Chromium, as a browser would (the token once in the address,
// then the cookie), and checks that the numbers it shows are the server's.
func TestBrowserDashboard(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	browser := chromium(t)
	bin := validateBinary(t)
	const token = "ui-test-token"
	ws := startServe(t, bin, calculatorConfig, "--ui", "--token", token, "--warm-pool", "2")
	addr := strings.TrimSuffix(strings.TrimPrefix(ws, "ws://"), "/v1/ws")

	// A finished episode: a real rollout through the server.
	out := filepath.Join(t.TempDir(), "results.json")
	oracleRollout(t, bin, out, "--server", ws, "--token", token)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	var recs []rollout.Record
	readFile(t, out, &recs)
	if len(recs) != 1 || recs[0].EpisodeResult.FinalScore != 1 {
		t.Fatalf("rollout results %+v, want one episode of reward 1", recs)
	}

	// The server's own account, read as a script would.
	type state struct {
		Steps    int64 `json:"steps"`
		Episodes []struct {
			Session string   `json:"session"`
			Reward  *float64 `json:"reward"`
			Reason  string   `json:"reason"`
		} `json:"episodes"`
		Containers float64 `json:"containers"`
		Envs       []struct {
			Pool *struct {
				Target   int   `json:"target"`
				Ready    int   `json:"ready"`
				FromPool int64 `json:"from_pool"`
				Cold     int64 `json:"cold"`
			} `json:"pool"`
		} `json:"envs"`
	}
	getState := func() state {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/ui/api/state", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st state
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 {
			t.Fatalf("state: %s, %v", resp.Status, err)
		}
		if len(st.Envs) != 1 || st.Envs[0].Pool == nil {
			t.Fatalf("state shows no warm pool: %+v", st.Envs)
		}
		return st
	}
	poolReady := func() bool { return getState().Envs[0].Pool.Ready == 2 }
	// The rollout's reset was cold; the pool fills behind it.
	waittest.For(t, "the warm pool to hold 2 sandboxes", 3*time.Minute, poolReady)

	// A live session, left open while the page loads: from the pool.
	c, err := gymclient.Dial(ctx, ws, gymclient.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, _, err := c.Reset(ctx, "calculator_api", gym.ResetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.WithoutCancel(ctx))
	for i := range 3 {
		cmd := fmt.Sprintf(`{"command":"echo dashboard-check-%d"}`, i)
		if _, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{gym.NewToolCall("c", gym.ToolExecuteCommand, cmd)}}); err != nil {
			t.Fatal(err)
		}
	}

	// The pool refills behind the live session's reset.
	waittest.For(t, "the warm pool to refill to 2", 3*time.Minute, poolReady)
	st := getState()
	if p := *st.Envs[0].Pool; p.Target != 2 || p.FromPool != 1 || p.Cold != 1 {
		t.Fatalf("state pool %+v, want target 2, ready 2, one reset from the pool and one cold", p)
	}
	if len(st.Episodes) != 1 || st.Episodes[0].Session != recs[0].SessionID || st.Episodes[0].Reward == nil || *st.Episodes[0].Reward != 1 {
		t.Fatalf("state episodes %+v, want the rollout's session %s with reward 1", st.Episodes, recs[0].SessionID)
	}
	rolloutSteps := int64(recs[0].EpisodeResult.Actions)
	if st.Steps < rolloutSteps+3 {
		t.Fatalf("state counts %d steps, want at least the rollout's %d + 3", st.Steps, rolloutSteps)
	}

	b := startBrowser(t, browser)
	// Ready when an event rendered the live session's three steps.
	b.open("http://"+addr+"/ui/?token="+token, `document.getElementById("status").textContent === "live" && document.getElementById("stat-sessions").textContent === "1"`)
	b.screenshot("dashboard", "", 1400)
	dom := b.dom()
	for id, want := range map[string]string{
		"stat-sessions":    "1",
		"stat-connections": "1",
		"stat-steps":       strconv.FormatInt(st.Steps, 10),
		"stat-episodes":    "1",
		"stat-mean-reward": "1.000",
		"stat-containers":  strconv.FormatFloat(st.Containers, 'f', -1, 64),
	} {
		if got := byID(t, dom, id); got != want {
			t.Errorf("#%s shows %q, the server says %q", id, got, want)
		}
	}
	if envs := cells(t, dom, "envs"); len(envs) != 1 || envs[0][0] != "calculator_api" || envs[0][8] != "2 / 2" || envs[0][11] != "1" || envs[0][12] != "1" {
		t.Errorf("environments table %q, want pool ready 2 / 2, 1 reset from the pool, 1 cold", envs)
	}
	if got := byID(t, dom, "stat-pool"); got != "2 / 2" {
		t.Errorf("#stat-pool shows %q, want 2 / 2", got)
	}
	sessions := cells(t, dom, "sessions")
	if len(sessions) != 1 || sessions[0][0] != s.ID() || sessions[0][1] != "calculator_api" || sessions[0][5] != "3" ||
		sessions[0][7] != "running" || sessions[0][8] != "$ echo dashboard-check-2" {
		t.Errorf("live sessions table %q, want session %s with 3 steps, running, last command echo dashboard-check-2", sessions, s.ID())
	}
	episodes := cells(t, dom, "episodes")
	if len(episodes) != 1 || episodes[0][1] != recs[0].SessionID || episodes[0][4] != "1.000" || episodes[0][6] != string(recs[0].EpisodeResult.TerminatedReason)+" (mark_done)" {
		t.Errorf("episodes table %q, want the rollout's episode %s with reward 1.000", episodes, recs[0].SessionID)
	}

	// The page follows the server live: one more step shows up without
	// a reload.
	if _, err := s.Step(ctx, gym.Action{ToolCalls: []gym.ToolCall{gym.NewToolCall("c", gym.ToolExecuteCommand, `{"command":"echo dashboard-live"}`)}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for b.eval(`document.getElementById("stat-steps").textContent`) != strconv.FormatInt(st.Steps+1, 10) {
		if time.Now().After(deadline) {
			t.Fatalf("the page shows %v steps 30s after step %d", b.eval(`document.getElementById("stat-steps").textContent`), st.Steps+1)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := b.eval(`document.querySelector("#sessions tbody td:last-child").textContent`); got != "$ echo dashboard-live" {
		t.Errorf("last command %v after the new step", got)
	}

	// Another browser, without the token, is refused.
	other := startBrowser(t, browser)
	other.open("http://"+addr+"/ui/", `document.readyState === "complete"`)
	if refused := other.dom(); !strings.Contains(refused, "unauthenticated") || strings.Contains(refused, "stat-sessions") {
		t.Errorf("the dashboard without the token: %.300s", refused)
	}
}

// TestBrowserViewer runs a real oracle rollout of the calculator
// environment, writes its report with `gymserver view`, loads it in
// headless Chromium and checks the numbers it shows against the results
// and stats files.
func TestBrowserViewer(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	browser := chromium(t)
	bin := validateBinary(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "run", "results.json")
	oracleRollout(t, bin, out)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	report := filepath.Join(dir, "report.html")
	if b, err := exec.CommandContext(ctx, bin, "view", out, "-o", report).CombinedOutput(); err != nil {
		t.Fatalf("view: %v\n%s", err, b)
	}
	var recs []rollout.Record
	var stats rollout.Stats
	readFile(t, out, &recs)
	readFile(t, rollout.StatsPath(out), &stats)
	if len(recs) != 1 {
		t.Fatalf("%d results, want 1", len(recs))
	}
	var traj gym.Trajectory
	readFile(t, filepath.Join(filepath.Dir(out), recs[0].TrajectoryFile), &traj)

	b := startBrowser(t, browser)
	b.open("file://"+report, `document.getElementById("f-count").textContent !== ""`)
	b.screenshot("viewer", "", 1400)
	// #ep-0 opens the episode: its transcript and tests.
	b.open("file://"+report+"#ep-0", `document.getElementById("ep-0").open`)
	b.screenshot("viewer-episode", "#ep-0", 1600)
	dom := b.dom()
	if got, want := byID(t, dom, "f-count"), "1 of 1 episodes"; got != want {
		t.Errorf("filter count %q, want %q (the page's script ran)", got, want)
	}
	o := stats.Overall
	stat := cells(t, dom, "stats-table")
	if len(stat) < 1 || len(stat[0]) < 6 {
		t.Fatalf("stats table %q", stat)
	}
	for i, want := range []string{strconv.Itoa(o.Episodes), strconv.Itoa(o.Scored), strconv.Itoa(o.Successes),
		strconv.FormatFloat(100*o.SuccessRate, 'f', 1, 64) + "%", strconv.FormatFloat(o.MeanReward, 'f', 3, 64)} {
		if stat[0][i] != want {
			t.Errorf("stats column %d shows %q, the stats file says %q", i, stat[0][i], want)
		}
	}
	list := cells(t, dom, "episode-list")
	r := recs[0].EpisodeResult
	if len(list) != 1 || list[0][3] != strconv.FormatFloat(r.FinalScore, 'f', 3, 64) || list[0][5] != string(r.TerminatedReason) ||
		list[0][7] != fmt.Sprintf("%d/%d", r.TestsPassed, r.TestsTotal) || list[0][11] != recs[0].TrajectoryID {
		t.Errorf("episode list %q, want reward %.3f, %s, tests %d/%d", list, r.FinalScore, r.TerminatedReason, r.TestsPassed, r.TestsTotal)
	}
	// Every test of the evaluation, with its status.
	tests := cells(t, dom, "tests-0")
	if len(tests) != len(traj.Evaluation.Tests) || len(tests) == 0 {
		t.Fatalf("tests table has %d rows, the trajectory %d tests", len(tests), len(traj.Evaluation.Tests))
	}
	for i, tc := range traj.Evaluation.Tests {
		if tests[i][0] != tc.Name || tests[i][1] != tc.Status {
			t.Errorf("test row %d %q, want %s %s", i, tests[i], tc.Name, tc.Status)
		}
	}
	if !regexp.MustCompile(`<details class="episode ep" id="ep-0"[^>]* open`).MatchString(dom) {
		t.Error("#ep-0 did not open the episode")
	}
	for _, id := range []string{"reward-histogram", "task-success", "step-latency", "time-mean"} {
		if !strings.Contains(dom, `id="`+id+`"><svg`) {
			t.Errorf("plot #%s is not drawn", id)
		}
	}
}

// TestBrowserCompare opens the comparison page of two rollouts (`gymserver
// view A B`) in Chromium: its stats rows and its task row with B − A are
// what the stats files say, and every plot is drawn with a size.
func TestBrowserCompare(t *testing.T) {
	browser := chromium(t)
	a, b := viewRollout(t), viewRollout(t)
	if code, _, stderr := viewCmd(t, a, b); code != 0 {
		t.Fatalf("view A B: exit %d, stderr:\n%s", code, stderr)
	}
	var sa, sb rollout.Stats
	readFile(t, rollout.StatsPath(a), &sa)
	readFile(t, rollout.StatsPath(b), &sb)
	page := strings.TrimSuffix(a, ".json") + ".compare.html"

	br := startBrowser(t, browser)
	br.open("file://"+page, `document.getElementById("compare-tasks") !== null`)
	br.screenshot("compare", "", 1400)
	dom := br.dom()
	stats := cells(t, dom, "compare-stats")
	if len(stats) != 2 {
		t.Fatalf("stats table rows %q, want A and B", stats)
	}
	for i, o := range []rollout.Aggregate{sa.Overall, sb.Overall} {
		want := []string{strconv.Itoa(o.Episodes), strconv.Itoa(o.Scored), strconv.Itoa(o.Successes),
			strconv.FormatFloat(100*o.SuccessRate, 'f', 1, 64) + "%", strconv.FormatFloat(o.MeanReward, 'f', 3, 64)}
		if len(stats[i]) < len(want) || fmt.Sprint(stats[i][:len(want)]) != fmt.Sprint(want) {
			t.Errorf("stats row %c %q, the stats file says %q", 'A'+i, stats[i], want)
		}
	}
	ta, tb := sa.Tasks["echo/echo"], sb.Tasks["echo/echo"]
	tasks := cells(t, dom, "compare-tasks")
	if len(tasks) != 1 || len(tasks[0]) != 9 {
		t.Fatalf("task table rows %q, want one task with 9 cells", tasks)
	}
	row := tasks[0]
	if row[0] != "echo/echo" || row[1] != strconv.Itoa(ta.Episodes) || row[4] != strconv.Itoa(tb.Episodes) ||
		row[3] != strconv.FormatFloat(ta.MeanReward, 'f', 3, 64) || row[6] != strconv.FormatFloat(tb.MeanReward, 'f', 3, 64) {
		t.Errorf("task row %q; stats A %+v, B %+v", row, ta, tb)
	}
	delta, err := strconv.ParseFloat(strings.TrimPrefix(row[8], "+"), 64)
	if err != nil || math.Abs(delta-(tb.MeanReward-ta.MeanReward)) > 0.0005 {
		t.Errorf("B − A mean reward %q, want %.3f", row[8], tb.MeanReward-ta.MeanReward)
	}
	for _, id := range []string{"reward-histogram-a", "reward-histogram-b", "step-latency-a", "step-latency-b", "time-mean-a", "time-mean-b"} {
		w, _ := br.eval(`(function () { const s = document.querySelector("#` + id + ` svg"); return s ? s.getBoundingClientRect().width : 0; })()`).(float64)
		if w <= 0 {
			t.Errorf("plot #%s is not drawn (width %v)", id, w)
		}
	}
}
