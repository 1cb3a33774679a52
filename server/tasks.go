package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/gymserver/gymserver/gym"
	"github.com/gymserver/gymserver/server/wire"
)

// taskPage is one page of an environment's tasks, as the tasks op and
// GET /v1/envs/{id}/tasks serve it.
type taskPage struct {
	env    string
	total  int
	offset int
	tasks  []gym.TaskSpec
}

// taskOverhead approximates the encoded size of a task's fixed fields,
// for the page's frame budget.
const taskOverhead = 64

// listTasks returns the page of env's tasks from offset: up to limit of
// them (0 means wire.DefaultTasksLimit), without prompts unless prompts.
// An environment that is not a gym.TaskLister pages over its spec's
// tasks. The page stops early, after at least one task, where it would no
// longer fit in a frame of max_frame_bytes. Errors: not_found /
// unknown_env, invalid_argument / bad_request for a missing env or an
// offset or limit out of range.
func (s *Server) listTasks(env string, offset, limit int, prompts bool) (taskPage, error) {
	if env == "" {
		return taskPage{}, errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest, "field env is required")
	}
	if offset < 0 {
		return taskPage{}, errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest, "offset %d is negative", offset)
	}
	if limit < 0 || limit > wire.MaxTasksLimit {
		return taskPage{}, errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest, "limit %d is out of range 1 … %d (0 means %d)",
			limit, wire.MaxTasksLimit, wire.DefaultTasksLimit)
	}
	if limit == 0 {
		limit = wire.DefaultTasksLimit
	}
	e, err := s.opts.Registry.Lookup(env)
	if err != nil {
		return taskPage{}, &reasonError{reason: wire.ReasonUnknownEnv, err: err}
	}
	var tasks []gym.TaskSpec
	var total int
	if l, ok := e.(gym.TaskLister); ok {
		tasks, total = l.Tasks(offset, limit)
	} else {
		all := e.Spec().Tasks
		total = len(all)
		start := min(offset, total)
		tasks = all[start:min(start+limit, total)]
	}
	// Bound the page by the frame limit: with long prompts, 1000 tasks
	// could make a response the client refuses.
	budget := s.opts.MaxFrameBytes - 4<<10
	out := make([]gym.TaskSpec, 0, len(tasks))
	for _, t := range tasks {
		if !prompts {
			t.Prompt = ""
		}
		budget -= int64(taskOverhead + len(t.ID) + len(t.Prompt) + valueBytes(t.Metadata))
		if budget < 0 && len(out) > 0 {
			break
		}
		out = append(out, t)
	}
	return taskPage{env: env, total: total, offset: offset, tasks: out}, nil
}

// envsSpec bounds spec for envs and GET /v1/envs: at most wire.EnvsTasks
// tasks, and a task count no smaller than the tasks listed.
func envsSpec(spec gym.EnvSpec) gym.EnvSpec {
	spec.TaskCount = max(spec.TaskCount, len(spec.Tasks))
	if len(spec.Tasks) > wire.EnvsTasks {
		spec.Tasks = spec.Tasks[:wire.EnvsTasks]
	}
	return spec
}

// tasks handles the tasks op. It reads only in-memory task lists, so it is
// answered on the reader, like envs.
func (c *conn) tasks(req wire.Request) {
	prompts := req.Prompts == nil || *req.Prompts
	p, err := c.srv.listTasks(req.Env, req.Offset, req.Limit, prompts)
	if err != nil {
		c.reply(req.ID, nil, err)
		return
	}
	c.reply(req.ID, wire.TasksResult{Env: p.env, Total: p.total, Offset: p.offset, Tasks: wire.FromTaskSpecs(p.tasks)}, nil)
}

// tasksJSON serves GET /v1/envs/{id}/tasks?offset=&limit=&prompts=, the
// tasks op over HTTP.
func (s *Server) tasksJSON(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, err1 := queryInt(q.Get("offset"), "offset")
	limit, err2 := queryInt(q.Get("limit"), "limit")
	prompts := true
	var err3 error
	if v := q.Get("prompts"); v != "" {
		var perr error
		if prompts, perr = strconv.ParseBool(v); perr != nil {
			err3 = errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest, "query parameter prompts=%q is not a boolean", v)
		}
	}
	err := errors.Join(err1, err2, err3)
	var p taskPage
	if err == nil {
		p, err = s.listTasks(chi.URLParam(r, "id"), offset, limit, prompts)
	}
	if err != nil {
		status := http.StatusBadRequest
		if gym.ClassOf(err) == gym.ClassNotFound {
			status = http.StatusNotFound
		}
		s.httpError(w, status, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(struct {
		Env    string         `json:"env"`
		Total  int            `json:"total"`
		Offset int            `json:"offset"`
		Tasks  []gym.TaskSpec `json:"tasks"`
	}{p.env, p.total, p.offset, p.tasks})
}

// queryInt parses the integer query parameter name; empty is 0.
func queryInt(v, name string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, errorf(gym.ClassInvalidArgument, wire.ReasonBadRequest, "query parameter %s=%q is not an integer", name, v)
	}
	return n, nil
}
