package server_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	gymclient "github.com/gymserver/gymserver/clients/go"
	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/gym/gymtest"
	"github.com/gymserver/gymserver/server"
	"github.com/gymserver/gymserver/server/wire"
)

// manyTasks returns n tasks task-000, task-001, ... with a prompt of
// promptBytes bytes (at least its id) and metadata.
func manyTasks(n, promptBytes int) []gymtest.Task {
	out := make([]gymtest.Task, n)
	for i := range out {
		id := fmt.Sprintf("task-%03d", i)
		prompt := "Solve " + id + "."
		if pad := promptBytes - len(prompt); pad > 0 {
			prompt += strings.Repeat(".", pad)
		}
		out[i] = gymtest.Task{ID: id, Prompt: prompt, Expect: map[string]string{"a.txt": id},
			Metadata: map[string]any{"index": float64(i), "tags": []any{"even", float64(i % 2)}, "weight": 0.5}}
	}
	return out
}

// pagedEnv is a gymtest.Env that lists its tasks as a gym.TaskLister
// does: Spec carries the first 100 tasks and the count.
type pagedEnv struct{ *gymtest.Env }

var _ gym.TaskLister = pagedEnv{}

func (e pagedEnv) Spec() gym.EnvSpec {
	spec := e.Env.Spec()
	spec.Tasks, spec.TaskCount = e.Tasks(0, 100)
	return spec
}

func (e pagedEnv) Tasks(offset, limit int) ([]gym.TaskSpec, int) {
	all := e.Env.Spec().Tasks
	start := min(offset, len(all))
	end := len(all)
	if limit >= 0 {
		end = min(start+limit, end)
	}
	return all[start:end], len(all)
}

// startTasksServer serves two environments of 250 tasks each: "paged"
// (a gym.TaskLister) and "plain" (not one: the server pages over its
// spec).
func startTasksServer(t *testing.T, opts server.Options, promptBytes int) (*testServer, []gym.TaskSpec) {
	t.Helper()
	plain := gymtest.NewEnv("plain", manyTasks(250, promptBytes)...)
	reg, err := gym.NewRegistry(pagedEnv{gymtest.NewEnv("paged", manyTasks(250, promptBytes)...)}, plain)
	if err != nil {
		t.Fatal(err)
	}
	opts.Registry = reg
	return startServer(t, opts, nil), plain.Spec().Tasks
}

func taskIDs(ts []gym.TaskSpec) []string {
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	return ids
}

func TestTasksPaging(t *testing.T) {
	ts, all := startTasksServer(t, server.Options{}, 0)
	c := dial(t, ts, gymclient.Options{})
	ctx := t.Context()
	specs, err := c.Specs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range specs {
		if spec.TaskCount != 250 || len(spec.Tasks) != wire.EnvsTasks || spec.Tasks[99].ID != "task-099" {
			t.Errorf("envs: %s has task_count %d and %d tasks (last %q); want 250 and the first 100",
				spec.ID, spec.TaskCount, len(spec.Tasks), spec.Tasks[len(spec.Tasks)-1].ID)
		}
	}
	for _, env := range []string{"paged", "plain"} {
		t.Run(env, func(t *testing.T) {
			for _, tt := range []struct {
				offset, limit int
				want          []gym.TaskSpec
			}{
				{0, 0, all[:100]}, // limit 0: the default page of 100
				{0, 3, all[:3]},
				{240, 100, all[240:]},
				{249, 1, all[249:]},
				{250, 10, nil},
				{1000, 10, nil},
				{0, wire.MaxTasksLimit, all},
			} {
				got, total, err := c.Tasks(ctx, env, tt.offset, tt.limit)
				if err != nil {
					t.Fatalf("tasks %d+%d: %v", tt.offset, tt.limit, err)
				}
				if total != 250 {
					t.Errorf("tasks %d+%d: total %d, want 250", tt.offset, tt.limit, total)
				}
				// Metadata survives msgpack: integral numbers come back
				// as the float64 a JSON config gives.
				if d := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); d != "" {
					t.Errorf("tasks %d+%d (-want +got):\n%s", tt.offset, tt.limit, d)
				}
			}
			// The remote Env lists every task as a gym.TaskLister.
			reg, err := c.Registry(ctx)
			if err != nil {
				t.Fatal(err)
			}
			e, err := reg.Lookup(env)
			if err != nil {
				t.Fatal(err)
			}
			lister, ok := e.(gym.TaskLister)
			if !ok {
				t.Fatalf("remote env %T is not a gym.TaskLister", e)
			}
			got, total := lister.Tasks(0, -1)
			if total != 250 || !cmp.Equal(taskIDs(got), taskIDs(all)) {
				t.Errorf("Tasks(0, -1): %d tasks, total %d; want all 250", len(got), total)
			}
			got, total = lister.Tasks(248, 5)
			if total != 250 || !cmp.Equal(taskIDs(got), []string{"task-248", "task-249"}) {
				t.Errorf("Tasks(248, 5) = %v, %d", taskIDs(got), total)
			}
			if got, total := lister.Tasks(7, 0); len(got) != 0 || total != 250 {
				t.Errorf("Tasks(7, 0) = %d tasks, total %d; want none of 250", len(got), total)
			}
		})
	}
}

func TestTasksErrors(t *testing.T) {
	ts, _ := startTasksServer(t, server.Options{}, 0)
	rc := dialRaw(t, ts, nil)
	for i, tt := range []struct {
		name       string
		req        wire.Request
		wantCode   gym.ErrorClass
		wantReason string
	}{
		{"unknown_env", wire.Request{Env: "nope"}, gym.ClassNotFound, wire.ReasonUnknownEnv},
		{"missing_env", wire.Request{}, gym.ClassInvalidArgument, wire.ReasonBadRequest},
		{"negative_offset", wire.Request{Env: "paged", Offset: -1}, gym.ClassInvalidArgument, wire.ReasonBadRequest},
		{"negative_limit", wire.Request{Env: "paged", Limit: -1}, gym.ClassInvalidArgument, wire.ReasonBadRequest},
		{"limit_too_large", wire.Request{Env: "plain", Limit: wire.MaxTasksLimit + 1}, gym.ClassInvalidArgument, wire.ReasonBadRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.ID, tt.req.Op = uint64(100+i), wire.OpTasks
			r := rc.call(tt.req, nil)
			if r.OK || r.Error == nil || r.Error.Code != string(tt.wantCode) || r.Error.Reason != tt.wantReason || r.Error.Mask {
				t.Errorf("response %+v, want %s / %s", r.Error, tt.wantCode, tt.wantReason)
			}
		})
	}
	// Without prompts, the rest of each task is there.
	var res wire.TasksResult
	no := false
	if r := rc.call(wire.Request{ID: 200, Op: wire.OpTasks, Env: "paged", Offset: 10, Limit: 2, Prompts: &no}, &res); !r.OK {
		t.Fatalf("tasks without prompts: %+v", r.Error)
	}
	if len(res.Tasks) != 2 || res.Tasks[0].ID != "task-010" || res.Tasks[0].Prompt != "" || wire.JSONValue(res.Tasks[1].Metadata["index"]) != float64(11) ||
		res.Env != "paged" || res.Offset != 10 || res.Total != 250 {
		t.Errorf("tasks without prompts: %+v", res)
	}
	// The typed error through the Go client.
	c := dial(t, ts, gymclient.Options{})
	var ce *gymclient.Error
	if _, _, err := c.Tasks(t.Context(), "nope", 0, 10); !errors.Is(err, gym.ErrNotFound) || !errors.As(err, &ce) || ce.Reason != wire.ReasonUnknownEnv {
		t.Errorf("unknown env through the client: %v", err)
	}
}

// TestTasksPageFitsFrame: with long prompts a page stops where the
// response would outgrow max_frame_bytes, and paging on gets every task.
func TestTasksPageFitsFrame(t *testing.T) {
	const maxFrame = 64 << 10
	ts, all := startTasksServer(t, server.Options{MaxFrameBytes: maxFrame}, 10<<10)
	c := dial(t, ts, gymclient.Options{})
	ctx := t.Context()
	got, total, err := c.Tasks(ctx, "paged", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if total != 250 || len(got) == 0 || len(got) >= 10 {
		t.Fatalf("page of 10 KiB prompts under a 64 KiB frame limit: %d tasks of %d; want a few", len(got), total)
	}
	f, err := wire.Encode(wire.Response{ID: 1, OK: true, Result: wire.TasksResult{Env: "paged", Total: total, Tasks: wire.FromTaskSpecs(got)}})
	if err != nil || len(f) > maxFrame {
		t.Errorf("page encodes to %d bytes (%v), limit %d", len(f), err, maxFrame)
	}
	reg, err := c.Registry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := reg.Lookup("plain")
	listed, total, err := e.(*gymclient.Env).ListTasks(ctx, 0, -1)
	if err != nil || total != 250 || !cmp.Equal(taskIDs(listed), taskIDs(all)) {
		t.Errorf("ListTasks: %d tasks, total %d, %v; want all 250", len(listed), total, err)
	}
}

func TestTasksHTTP(t *testing.T) {
	ts, all := startTasksServer(t, server.Options{Token: "secret"}, 0)
	get := func(path string, v any) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+ts.addr+path, nil)
		req.Header.Set("Authorization", "Bearer secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return resp.StatusCode
	}
	var envs struct {
		Envs []gym.EnvSpec `json:"envs"`
	}
	if code := get("/v1/envs", &envs); code != http.StatusOK || len(envs.Envs) != 2 {
		t.Fatalf("GET /v1/envs: %d %+v", code, envs)
	}
	for _, e := range envs.Envs {
		if e.TaskCount != 250 || len(e.Tasks) != wire.EnvsTasks {
			t.Errorf("GET /v1/envs: %s has task_count %d and %d tasks; want 250 and 100", e.ID, e.TaskCount, len(e.Tasks))
		}
	}
	var page struct {
		Env    string         `json:"env"`
		Total  int            `json:"total"`
		Offset int            `json:"offset"`
		Tasks  []gym.TaskSpec `json:"tasks"`
	}
	if code := get("/v1/envs/plain/tasks?offset=245&limit=100", &page); code != http.StatusOK ||
		page.Env != "plain" || page.Total != 250 || page.Offset != 245 || !cmp.Equal(page.Tasks, all[245:]) {
		t.Errorf("GET tasks 245+100: %d %+v", code, page)
	}
	if code := get("/v1/envs/paged/tasks?offset=300", &page); code != http.StatusOK || page.Tasks == nil || len(page.Tasks) != 0 {
		t.Errorf("GET tasks past the end: %d, tasks %v; want an empty list", code, page.Tasks)
	}
	if code := get("/v1/envs/paged/tasks?limit=1&prompts=false", &page); code != http.StatusOK || len(page.Tasks) != 1 || page.Tasks[0].Prompt != "" {
		t.Errorf("GET tasks without prompts: %d %+v", code, page.Tasks)
	}
	for _, tt := range []struct {
		path       string
		wantStatus int
		wantCode   gym.ErrorClass
	}{
		{"/v1/envs/nope/tasks", http.StatusNotFound, gym.ClassNotFound},
		{"/v1/envs/paged/tasks?limit=abc", http.StatusBadRequest, gym.ClassInvalidArgument},
		{"/v1/envs/paged/tasks?limit=1001", http.StatusBadRequest, gym.ClassInvalidArgument},
		{"/v1/envs/paged/tasks?offset=-3", http.StatusBadRequest, gym.ClassInvalidArgument},
		{"/v1/envs/paged/tasks?prompts=maybe", http.StatusBadRequest, gym.ClassInvalidArgument},
	} {
		var body struct {
			Error wire.Error `json:"error"`
		}
		if code := get(tt.path, &body); code != tt.wantStatus || body.Error.Code != string(tt.wantCode) || body.Error.Message == "" {
			t.Errorf("GET %s: %d %+v, want %d %s", tt.path, code, body.Error, tt.wantStatus, tt.wantCode)
		}
	}
}
