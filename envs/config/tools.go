package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gymserver/gymserver/gym"
)

// Tool is a custom tool of an environment or a task (`tools[]`): a
// function the model may call beside the standard tools, run in the
// sandbox like execute_command: as the agent's user, in the working
// directory, under the command timeout and the output cap, counted as an
// action.
type Tool struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Parameters is the JSON Schema of the arguments (gym.Schema: an
	// object of scalar, array and object parameters). A call's arguments
	// are checked against it before the command runs. Without parameters
	// (the zero Schema) the tool takes none; an empty Type means "object".
	Parameters gym.Schema `json:"parameters"`
	// Command is the program and its arguments. It gets the call's
	// arguments as one JSON object on stdin and nowhere else: they never
	// become part of a command line. In the file a string is run with
	// /bin/sh -c (the string is the config's, not the model's).
	Command []string `json:"command"`
	// Timeout bounds one call; 0 means the task's command timeout, which
	// also caps it.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Spec returns the tool's schema as the agent sees it.
func (t Tool) Spec() gym.Tool {
	s := t.Parameters
	if s.Type == "" {
		s.Type = "object"
	}
	if s.Properties == nil {
		s.Properties = map[string]gym.Property{}
	}
	if s.Required == nil {
		s.Required = []string{}
	}
	return gym.Tool{Type: "function", Function: gym.FunctionSpec{Name: t.Name, Description: t.Description, Parameters: s}}
}

// Validate checks a tool made in code as Load checks one read from a file
// (gym.CheckTool, a command, a timeout that is not negative). Errors wrap
// gym.ErrInvalidArgument and name the tool and the field at fault.
func (t Tool) Validate() error {
	var errs []error
	for _, p := range t.problems() {
		errs = append(errs, fmt.Errorf("tool %q: %w", t.Name, p))
	}
	if len(errs) == 0 {
		return nil
	}
	return gym.Classify(errors.Join(errs...), gym.ClassInvalidArgument)
}

func (t Tool) problems() []gym.ToolProblem {
	out := gym.CheckTool(t.Spec().Function)
	if len(t.Command) == 0 || t.Command[0] == "" {
		out = append(out, gym.ToolProblem{Path: "command", Message: "missing: the program that runs the tool in the sandbox"})
	}
	if t.Timeout < 0 {
		out = append(out, gym.ToolProblem{Path: "timeout", Message: "must not be negative"})
	}
	return out
}

// tools decodes a `tools` array. inherited are the tools the owner
// already has (a task's environment's), whose names its own may not take.
func (d *decoder) tools(path string, raw json.RawMessage, inherited []Tool) []Tool {
	seen := map[string]string{}
	for _, t := range inherited {
		seen[t.Name] = "a tool of the environment; a task's tools add to its environment's"
	}
	var out []Tool
	for i, it := range d.array(path, raw) {
		p := index(path, i)
		t, ok := d.tool(p, it)
		if !ok {
			continue
		}
		if prev, dup := seen[t.Name]; dup {
			d.fail(join(p, "name"), "%q is already %s", t.Name, prev)
			continue
		}
		seen[t.Name] = "declared at " + p
		out = append(out, t)
	}
	return out
}

// tool decodes one tool object and checks it.
func (d *decoder) tool(path string, raw json.RawMessage) (Tool, bool) {
	obj, ok := d.object(path, raw)
	if !ok {
		return Tool{}, false
	}
	before := len(d.errs)
	t := Tool{Parameters: gym.Schema{Type: "object", Properties: map[string]gym.Property{}, Required: []string{}}}
	d.apply(path, obj, fields{
		"name":        d.str(&t.Name),
		"description": d.str(&t.Description),
		"parameters":  func(p string, r json.RawMessage) { d.schema(p, r, &t.Parameters) },
		"command": func(p string, r json.RawMessage) {
			var s string
			if json.Unmarshal(r, &s) == nil {
				if s != "" {
					t.Command = []string{"/bin/sh", "-c", s}
				}
				return
			}
			before := len(d.errs)
			d.strings(&t.Command)(p, r)
			if len(d.errs) > before {
				d.failed[p] = true // an element is wrong: it is not missing
			}
		},
		"timeout": d.duration(&t.Timeout),
	})
	for _, pr := range t.problems() {
		if p := join(path, pr.Path); !d.failed[p] {
			d.fail(p, "%s", pr.Message)
		}
	}
	return t, len(d.errs) == before
}

// schema decodes a tool's parameters.
func (d *decoder) schema(path string, raw json.RawMessage, s *gym.Schema) {
	obj, ok := d.object(path, raw)
	if !ok {
		return
	}
	d.apply(path, obj, fields{
		"type": d.str(&s.Type),
		"properties": func(p string, r json.RawMessage) {
			props, ok := d.object(p, r)
			if !ok {
				return
			}
			for name, pr := range props {
				// Kept also when it has errors, so that required
				// does not report it missing as well.
				var prop gym.Property
				d.property(join(p, name), pr, &prop, true)
				s.Properties[name] = prop
			}
		},
		"required": func(p string, r json.RawMessage) {
			d.strings(&s.Required)(p, r)
			if s.Required == nil {
				s.Required = []string{}
			}
		},
		"additionalProperties": d.boolean(&s.AdditionalProperties),
	})
}

// property decodes one parameter's schema; items says whether it may
// have items (an element's schema may not).
func (d *decoder) property(path string, raw json.RawMessage, p *gym.Property, items bool) {
	obj, ok := d.object(path, raw)
	if !ok {
		return
	}
	f := fields{
		"type":        d.str(&p.Type),
		"description": d.str(&p.Description),
		"enum":        d.strings(&p.Enum),
	}
	if items {
		f["items"] = func(ip string, r json.RawMessage) {
			var it gym.Property
			d.property(ip, r, &it, false)
			p.Items = &it
		}
	}
	d.apply(path, obj, f)
}
