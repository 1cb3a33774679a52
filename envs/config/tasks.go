package config

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gymserver/gymserver/envs/harbor"
)

// Task is one task of an environment. After Load every field is resolved:
// where the task sets nothing, the environment's value is filled in, so a
// Task alone says how to run and score it.
type Task struct {
	ID     string `json:"id"`
	Prompt string `json:"prompt"`
	// Files are starter files given inline, written into the sandbox at
	// reset; paths are absolute after loading (relative ones are below
	// the working directory).
	Files []FileContent `json:"files,omitempty"`
	// CopyFolders are starter files copied from the host at reset.
	CopyFolders []CopySpec `json:"copy_folders,omitempty"`
	// HiddenTests and HiddenFiles are copied in only for evaluation. The
	// folder of each hidden file (the outermost, when one holds another)
	// is a hidden root like a HiddenTests destination.
	HiddenTests []CopySpec    `json:"hidden_tests,omitempty"`
	HiddenFiles []FileContent `json:"hidden_files,omitempty"`
	Reference   *Reference    `json:"reference_solution,omitempty"`

	UnitTests   []string  `json:"unit_tests"`
	DockerImage string    `json:"docker_image"`
	Timeouts    Timeouts  `json:"timeout_config"`
	Reward      Reward    `json:"reward"`
	MaxActions  int       `json:"max_actions"`
	Resources   Resources `json:"resources"`
	Network     string    `json:"network"`
	// Tools are the task's custom tools: its environment's, then its own
	// (a task may add tools, not replace or remove its environment's).
	Tools []Tool `json:"tools,omitempty"`
	// Metadata is the task's free-form data, passed through untouched.
	Metadata map[string]any `json:"metadata,omitempty"`
	// Harbor is the folder of a Harbor task directory this task was read
	// from; empty for native tasks. HarborTask is what was read there.
	Harbor     string       `json:"harbor,omitempty"`
	HarborTask *harbor.Task `json:"-"`
	// Source says where the task was declared, for messages:
	// "environments[0].tasks[3]", "tasks.jsonl:12", "tasks/add/task.json".
	Source string `json:"-"`
	// Own marks the one task of an environment without task sources,
	// made from the environment's fields by OwnTask.
	Own bool `json:"-"`
}

// FileContent is a file given inline in the config.
type FileContent struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// maxTaskErrors bounds the problems reported for the tasks of one
// environment; a broken dataset of 10,000 tasks gets the first ones and a
// count.
const maxTaskErrors = 50

// maxTaskLine is the longest line of a tasks file.
const maxTaskLine = 64 << 20

// taskSources decodes the tasks of e: inline, from tasks_file and from
// tasks_dir, in that order. An environment without any source has one
// task, made from its own fields, whose id is the environment's.
func (d *decoder) taskSources(path string, e *Environment, inline []json.RawMessage, inlinePath string) {
	before := len(d.errs)
	seen := map[string]string{}
	add := func(t Task, ok bool) {
		if !ok {
			return
		}
		if prev, dup := seen[t.ID]; dup {
			d.fail(t.Source+".id", "duplicate task id %q (also %s)", t.ID, prev)
			return
		}
		seen[t.ID] = t.Source
		e.Tasks = append(e.Tasks, t)
	}
	for i, raw := range inline {
		if len(d.errs)-before >= maxTaskErrors {
			break
		}
		add(d.task(index(inlinePath, i), raw, e, d.dir))
	}
	if e.TasksFile != "" {
		d.tasksFile(join(path, "tasks_file"), e, add, before)
	}
	if e.TasksDir != "" {
		d.tasksDir(join(path, "tasks_dir"), e, add, before)
	}
	if n := len(d.errs) - before; n >= maxTaskErrors {
		d.errs = append(d.errs[:before+maxTaskErrors], fmt.Errorf("%s: more problems in the tasks were not checked after the first %d", path, maxTaskErrors))
	}
	if inline == nil && e.TasksFile == "" && e.TasksDir == "" {
		t := OwnTask(*e)
		t.Source = path
		e.Tasks = []Task{t}
		return
	}
	if len(e.Tasks) == 0 && len(d.errs) == before {
		d.fail(path, "the task sources (tasks, tasks_file, tasks_dir) hold no task")
	}
}

// OwnTask returns the one task of an environment declared the seed's way,
// without task sources: the environment's prompt, hidden tests, reference
// and settings, under the environment's id.
func OwnTask(e Environment) Task {
	return Task{
		Own:         true,
		ID:          e.ID,
		Prompt:      e.Prompt,
		HiddenTests: e.HiddenTests,
		Reference:   e.Reference,
		UnitTests:   e.UnitTests,
		DockerImage: e.DockerImage,
		Timeouts:    e.Timeouts,
		Reward:      e.Reward,
		MaxActions:  e.MaxActions,
		Resources:   e.Resources,
		Network:     e.Network,
		Tools:       e.Tools,
	}
}

// defaults returns a task holding the environment's settings, for a task
// declared at src to start from.
func defaults(src string, e *Environment) Task {
	t := OwnTask(*e)
	t.Own = false
	t.Prompt, t.HiddenTests, t.Reference = "", nil, nil
	t.Source = src
	return t
}

// tasksFile reads a JSONL file of task objects.
func (d *decoder) tasksFile(path string, e *Environment, add func(Task, bool), before int) {
	file := e.TasksFile
	if !filepath.IsAbs(file) {
		file = filepath.Join(d.dir, file)
	}
	e.TasksFile = file
	data, err := os.ReadFile(file)
	if err != nil {
		d.fail(path, "%v", err)
		return
	}
	name := d.rel(file)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), maxTaskLine)
	for line := 1; sc.Scan(); line++ {
		if len(d.errs)-before >= maxTaskErrors {
			return
		}
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		add(d.task(fmt.Sprintf("%s:%d", name, line), raw, e, filepath.Dir(file)))
	}
	if err := sc.Err(); err != nil {
		d.fail(path, "%s: %v", file, err)
	}
}

// tasksDir reads a folder of task folders: native ones hold task.json,
// Harbor ones task.toml. A folder that holds task.toml itself is one
// Harbor task.
func (d *decoder) tasksDir(path string, e *Environment, add func(Task, bool), before int) {
	dir := e.TasksDir
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(d.dir, dir)
	}
	e.TasksDir = dir
	if isFile(filepath.Join(dir, "task.toml")) {
		add(d.harborTask(path, dir, e))
		return
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		d.fail(path, "%v", err)
		return
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	for _, ent := range entries {
		if len(d.errs)-before >= maxTaskErrors {
			return
		}
		name := ent.Name()
		sub := filepath.Join(dir, name)
		if strings.HasPrefix(name, ".") || !isDir(sub) {
			continue
		}
		switch {
		case isFile(filepath.Join(sub, "task.json")):
			src := d.rel(filepath.Join(sub, "task.json"))
			raw, err := os.ReadFile(filepath.Join(sub, "task.json"))
			if err != nil {
				d.fail(src, "%v", err)
				continue
			}
			t, ok := d.task(src, raw, e, sub)
			if ok && t.ID != name {
				d.fail(src+".id", "%q differs from its folder's name %q", t.ID, name)
				ok = false
			}
			add(t, ok)
		case isFile(filepath.Join(sub, "task.toml")):
			add(d.harborTask(path, sub, e))
		default:
			d.fail(path, "%s: neither task.json nor task.toml: not a task folder", sub)
		}
	}
}

// rel names a host path for messages: relative to the config's folder
// when it is below it.
func (d *decoder) rel(p string) string {
	if r, err := filepath.Rel(d.dir, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// task decodes one task object whose relative host paths resolve against
// dir; the environment's fields fill in what it does not set.
func (d *decoder) task(src string, raw json.RawMessage, e *Environment, dir string) (Task, bool) {
	obj, ok := d.object(src, raw)
	if !ok {
		return Task{}, false
	}
	t := defaults(src, e)
	saved := d.dir
	d.dir = dir
	defer func() { d.dir = saved }()
	failed := len(d.errs)

	var copies, hidden []json.RawMessage
	var copiesPath, hiddenPath string
	var refFiles func(workdir string) []copyEntry
	workdir := e.WorkingDirectory
	d.apply(src, obj, fields{
		"id":     d.str(&t.ID),
		"prompt": d.str(&t.Prompt),
		"files": func(p string, r json.RawMessage) {
			t.Files = d.fileContents(p, r, workdir)
		},
		"copy_folders": func(p string, r json.RawMessage) { copiesPath, copies = p, d.array(p, r) },
		"hidden_tests": func(p string, r json.RawMessage) { hiddenPath, hidden = p, d.array(p, r) },
		"hidden_files": func(p string, r json.RawMessage) {
			t.HiddenFiles = d.fileContents(p, r, workdir)
		},
		"reference_solution": func(p string, r json.RawMessage) {
			t.Reference, refFiles = d.reference(p, r)
		},
		"unit_tests":     d.strings(&t.UnitTests),
		"docker_image":   d.str(&t.DockerImage),
		"timeout_config": func(p string, r json.RawMessage) { d.timeouts(p, r, &t.Timeouts) },
		"reward": func(p string, r json.RawMessage) {
			ro, ok := d.object(p, r)
			if !ok {
				return
			}
			d.apply(p, ro, fields{
				"mode":              d.str(&t.Reward.Mode),
				"success_threshold": d.float(&t.Reward.SuccessThreshold),
			})
		},
		"max_actions": d.integer(&t.MaxActions),
		"tools": func(p string, r json.RawMessage) {
			own := d.tools(p, r, e.Tools)
			t.Tools = append(append([]Tool(nil), e.Tools...), own...)
		},
		"metadata": func(p string, r json.RawMessage) {
			if isNull(r) {
				return
			}
			if err := json.Unmarshal(r, &t.Metadata); err != nil || t.Metadata == nil {
				d.fail(p, "want an object, got %s", kind(r))
			}
		},
	})
	switch {
	case d.failed[join(src, "id")]:
	case t.ID == "":
		d.fail(join(src, "id"), "missing")
	case !idPattern.MatchString(t.ID):
		d.fail(join(src, "id"), "%q: use letters, digits, '_', '.', '-' (at most 128)", t.ID)
	}
	t.Source = src
	if strings.TrimSpace(t.Prompt) == "" && !d.failed[join(src, "prompt")] {
		d.fail(join(src, "prompt"), "missing")
	}
	if len(t.UnitTests) == 0 {
		d.fail(join(src, "unit_tests"), "missing, here and in the environment: the reward comes from the unit tests")
	}
	if t.DockerImage == "" {
		d.fail(join(src, "docker_image"), "missing, here and in the environment")
	}
	if _, own := obj["timeout_config"]; own {
		d.checkTimeouts(join(src, "timeout_config"), t.Timeouts)
	}
	d.checkReward(src, t.Reward)
	if t.MaxActions < 1 {
		d.fail(join(src, "max_actions"), "must be at least 1, got %d", t.MaxActions)
	}

	var copyEntries, hiddenEntries, refEntries []copyEntry
	for i, c := range copies {
		if ce, ok := d.copySpec(index(copiesPath, i), c, workdir); ok {
			t.CopyFolders = append(t.CopyFolders, ce.spec)
			copyEntries = append(copyEntries, ce)
		}
	}
	for _, f := range t.Files {
		copyEntries = append(copyEntries, copyEntry{spec: CopySpec{Dest: f.Path}, destPath: join(src, "files"), files: []string{f.Path}})
	}
	for i, c := range hidden {
		if ce, ok := d.copySpec(index(hiddenPath, i), c, workdir); ok {
			t.HiddenTests = append(t.HiddenTests, ce.spec)
			hiddenEntries = append(hiddenEntries, ce)
		}
	}
	hiddenEntries = append(hiddenEntries, hiddenFileRoots(join(src, "hidden_files"), t.HiddenFiles)...)
	if refFiles != nil {
		refEntries = refFiles(workdir)
		for _, f := range t.Reference.Contents {
			refEntries = append(refEntries, copyEntry{spec: CopySpec{Dest: f.Path}, destPath: join(src, "reference_solution.contents"), files: []string{f.Path}})
		}
	}
	// The environment's own copy_folders are starter files of every task.
	copyEntries = append(copyEntries, d.envCopies...)
	d.checkDestinations(workdir, copyEntries, hiddenEntries, refEntries)
	return t, len(d.errs) == failed
}

// hiddenFileRoots groups inline hidden files by their outermost folder;
// each group is a hidden root.
func hiddenFileRoots(p string, files []FileContent) []copyEntry {
	dirs := map[string]bool{}
	for _, f := range files {
		dirs[path.Dir(f.Path)] = true
	}
	var roots []string
	for dir := range dirs {
		outer := true
		for other := range dirs {
			if other != dir && inside(dir, other) {
				outer = false
				break
			}
		}
		if outer {
			roots = append(roots, dir)
		}
	}
	sort.Strings(roots)
	var out []copyEntry
	for _, r := range roots {
		ce := copyEntry{spec: CopySpec{Src: "(inline)", Dest: r}, destPath: p}
		for _, f := range files {
			if inside(f.Path, r) {
				ce.files = append(ce.files, f.Path)
			}
		}
		out = append(out, ce)
	}
	return out
}

// HiddenRoots returns the hidden roots of t: its hidden_tests destinations
// and the outermost folders of its hidden files.
func (t Task) HiddenRoots() []string {
	var roots []string
	for _, c := range t.HiddenTests {
		roots = append(roots, c.Dest)
	}
	for _, ce := range hiddenFileRoots("", t.HiddenFiles) {
		roots = append(roots, ce.spec.Dest)
	}
	return roots
}

// fileContents decodes an object of sandbox path to content; relative
// paths are below workdir.
func (d *decoder) fileContents(p string, raw json.RawMessage, workdir string) []FileContent {
	obj, ok := d.object(p, raw)
	if !ok {
		return nil
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []FileContent
	for _, k := range keys {
		var content string
		if err := json.Unmarshal(obj[k], &content); err != nil {
			d.fail(join(p, k), "want a string (the file's content), got %s", kind(obj[k]))
			continue
		}
		dest := k
		if !strings.HasPrefix(dest, "/") {
			dest = workdir + "/" + dest
		}
		dest = path.Clean(dest)
		if dest == "/" || strings.HasSuffix(k, "/") || k == "" {
			d.fail(join(p, k), "not a file path")
			continue
		}
		if inside(path.Clean(workdir), dest) {
			d.fail(join(p, k), "%q: a file there would replace the working_directory %q", dest, workdir)
			continue
		}
		if len(content) > maxCopyBytes {
			d.fail(join(p, k), "%d bytes: more than the %d a copy may hold", len(content), maxCopyBytes)
			continue
		}
		out = append(out, FileContent{Path: dest, Content: content})
	}
	return out
}

// reference decodes a reference_solution object; its files are finished
// by the returned function once the working directory is known.
func (d *decoder) reference(p string, r json.RawMessage) (*Reference, func(workdir string) []copyEntry) {
	ro, ok := d.object(p, r)
	if !ok || isNull(r) {
		return nil, nil
	}
	ref := &Reference{}
	var files, contents []json.RawMessage
	var filesPath, contentsPath string
	d.apply(p, ro, fields{
		"files":    func(fp string, fr json.RawMessage) { filesPath, files = fp, d.array(fp, fr) },
		"contents": func(fp string, fr json.RawMessage) { contentsPath, contents = fp, []json.RawMessage{fr} },
		"commands": d.strings(&ref.Commands),
	})
	return ref, func(workdir string) []copyEntry {
		var entries []copyEntry
		for i, fr := range files {
			if c, ok := d.copySpec(index(filesPath, i), fr, workdir); ok {
				ref.Files = append(ref.Files, c.spec)
				entries = append(entries, c)
			}
		}
		if contents != nil {
			ref.Contents = d.fileContents(contentsPath, contents[0], workdir)
		}
		if len(files) == 0 && len(ref.Commands) == 0 && contents == nil {
			d.fail(p, "a reference solution needs files, contents or commands")
		}
		return entries
	}
}

// checkReward checks a reward section at path.
func (d *decoder) checkReward(path string, r Reward) {
	if r.Mode != RewardPassRate && r.Mode != RewardBinary {
		d.fail(join(path, "reward.mode"), "must be %q or %q, got %q", RewardPassRate, RewardBinary, r.Mode)
	}
	if r.SuccessThreshold <= 0 || r.SuccessThreshold > 1 {
		d.fail(join(path, "reward.success_threshold"), "must be in (0, 1], got %v", r.SuccessThreshold)
	}
}

// harborTask reads a Harbor task directory. The envs/harbor package does
// the full reading; here the task gets its id, prompt and source.
func (d *decoder) harborTask(path, dir string, e *Environment) (Task, bool) {
	t := defaults(dir, e)
	t.ID = filepath.Base(dir)
	t.Harbor = dir
	if !idPattern.MatchString(t.ID) {
		d.fail(path, "%s: the folder name %q is not a valid task id (letters, digits, '_', '.', '-')", dir, t.ID)
		return t, false
	}
	warnings, err := readHarbor(&t)
	if err != nil {
		d.fail(path, "%s: %v", dir, err)
		return t, false
	}
	for _, w := range warnings {
		d.warn("task %s: %s", t.ID, w)
	}
	if t.DockerImage == "" && t.HarborTask.Dockerfile == "" {
		d.fail(path, "%s: neither [environment] docker_image, environment/Dockerfile nor the environment's docker_image", dir)
		return t, false
	}
	return t, true
}

// Where a Harbor task's files go in the sandbox.
const (
	// HarborTestsDir receives tests/ for evaluation.
	HarborTestsDir = "/tests"
	// HarborSolutionDir receives solution/ when the oracle applies it:
	// the oracle acts as the agent, which may not write at /solution.
	HarborSolutionDir = "/tmp/solution"
)

// readHarbor fills t from the Harbor task directory t.Harbor and returns
// the warnings of what the task asks for that is not honoured.
func readHarbor(t *Task) ([]string, error) {
	list, err := harbor.Load(t.Harbor)
	if err != nil {
		return nil, err
	}
	if len(list) != 1 {
		return nil, fmt.Errorf("want one task, found %d", len(list))
	}
	h := list[0]
	switch u := strings.TrimSpace(string(h.Config.Verifier.User)); u {
	case "", "root", "0":
	default:
		return nil, fmt.Errorf("[verifier] user %q: gymserver runs the verifier as the agent's user (unset) or as root (\"root\" or 0)", u)
	}
	t.HarborTask = &h
	t.Prompt = h.Instruction
	// The task's image, else its Dockerfile, else the environment's image.
	switch {
	case h.Image != "":
		t.DockerImage = h.Image
	case h.Dockerfile != "":
		t.DockerImage = ""
	}
	if h.Config.Agent.TimeoutSec != nil {
		t.Timeouts.Global = h.Config.AgentTimeout()
	}
	t.Timeouts.Test = h.Config.VerifierTimeout()
	t.Resources.CPUs = h.Config.CPUs()
	t.Resources.MemoryBytes = h.Config.MemoryBytes()
	t.Resources.DiskBytes = h.Config.DiskBytes()
	t.Network = h.Config.Network()
	t.UnitTests = []string{"bash " + HarborTestsDir + "/test.sh"}
	t.Metadata = h.Config.Metadata
	t.HiddenTests = []CopySpec{{Src: h.TestsDir, Dest: HarborTestsDir}}
	if h.SolveScript != "" {
		t.Reference = &Reference{
			Files:    []CopySpec{{Src: h.SolutionDir, Dest: HarborSolutionDir}},
			Commands: []string{"bash " + HarborSolutionDir + "/solve.sh"},
		}
	}
	return h.Warnings, nil
}
