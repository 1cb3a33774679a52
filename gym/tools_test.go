package gym_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gymserver/gymserver/gym"
)

// lintSchema has a parameter of every kind.
var lintSchema = gym.Schema{
	Type: "object",
	Properties: map[string]gym.Property{
		"path":  {Type: "string"},
		"level": {Type: "string", Enum: []string{"error", "warning"}},
		"max":   {Type: "integer"},
		"ratio": {Type: "number"},
		"fix":   {Type: "boolean"},
		"files": {Type: "array", Items: &gym.Property{Type: "string"}},
		"any":   {Type: "array"},
		"opts":  {Type: "object"},
	},
	Required: []string{"path"},
}

func TestCheckArguments(t *testing.T) {
	for _, tc := range []struct {
		name, args, want, err string
	}{
		{"minimal", `{"path": "a.py"}`, `{"path":"a.py"}`, ""},
		{"every_kind", `{"path": "a.py", "level": "error", "max": 3, "ratio": 0.5, "fix": true, "files": ["x", "y"], "any": [1, "a"], "opts": {"k": [1]}}`,
			`{"path":"a.py","level":"error","max":3,"ratio":0.5,"fix":true,"files":["x","y"],"any":[1,"a"],"opts":{"k":[1]}}`, ""},
		{"kept_as_written", "{ \"path\" : \"<&>\",\n \"max\": 2.0 }", `{"path":"<&>","max":2.0}`, ""},
		{"missing", `{"level": "error"}`, "", `lint: missing required argument "path"`},
		{"empty", ``, "", `lint: missing required argument "path"`},
		{"unknown", `{"path": "a", "x": 1}`, "", `lint: unknown argument "x"`},
		{"not_object", `["a"]`, "", `lint: arguments are not a valid JSON object`},
		{"string_type", `{"path": 1}`, "", `lint: argument "path" must be a string, got a number`},
		{"null", `{"path": null}`, "", `lint: argument "path" must be a string, got null`},
		{"enum", `{"path": "a", "level": "info"}`, "", `lint: argument "level" must be one of "error", "warning", got "info"`},
		{"integer", `{"path": "a", "max": 1.5}`, "", `lint: argument "max" must be an integer, got 1.5`},
		{"number", `{"path": "a", "ratio": "0.5"}`, "", `lint: argument "ratio" must be a number, got a string`},
		{"boolean", `{"path": "a", "fix": "yes"}`, "", `lint: argument "fix" must be a boolean, got a string`},
		{"array", `{"path": "a", "files": "x"}`, "", `lint: argument "files" must be an array, got a string`},
		{"items", `{"path": "a", "files": ["x", 2]}`, "", `lint: argument "files" element 1 must be a string, got a number`},
		{"object", `{"path": "a", "opts": []}`, "", `lint: argument "opts" must be an object, got an array`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := gym.CheckArguments("lint", lintSchema, tc.args)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || gym.ClassOf(err) != gym.ClassAgent {
					t.Fatalf("err = %v (class %s), want %q", err, gym.ClassOf(err), tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %s, %v; want %s", got, err, tc.want)
			}
		})
	}
	// No parameters: empty and null arguments are {}.
	for _, args := range []string{"", " ", "null", "{}"} {
		if got, err := gym.CheckArguments("now", gym.Schema{Type: "object"}, args); err != nil || got != "{}" {
			t.Errorf("now(%q) = %s, %v", args, got, err)
		}
	}
	// additionalProperties lets undeclared arguments through unchecked.
	open := lintSchema
	open.AdditionalProperties = true
	if got, err := gym.CheckArguments("lint", open, `{"path": "a", "x": [1]}`); err != nil || got != `{"path":"a","x":[1]}` {
		t.Errorf("open schema: %s, %v", got, err)
	}
}

func TestCheckTool(t *testing.T) {
	good := gym.FunctionSpec{Name: "lint", Description: "Lint files.", Parameters: lintSchema}
	if p := gym.CheckTool(good); p != nil {
		t.Fatalf("good tool: %v", p)
	}
	for _, tc := range []struct {
		name string
		edit func(*gym.FunctionSpec)
		want []string
	}{
		{"standard_name", func(f *gym.FunctionSpec) { f.Name = "mark_done" }, []string{`name: "mark_done" is a standard tool; choose another name`}},
		{"bad_name", func(f *gym.FunctionSpec) { f.Name = "lint files" }, []string{`name: "lint files": use letters, digits, '_' and '-' (at most 64), as model APIs require`}},
		{"long_name", func(f *gym.FunctionSpec) { f.Name = strings.Repeat("a", 65) }, []string{`name: "` + strings.Repeat("a", 65) + `": use letters, digits, '_' and '-' (at most 64), as model APIs require`}},
		{"no_name", func(f *gym.FunctionSpec) { f.Name = "" }, []string{"name: missing"}},
		{"no_description", func(f *gym.FunctionSpec) { f.Description = " " }, []string{"description: missing: the model reads it to know what the tool does"}},
		{"not_object", func(f *gym.FunctionSpec) { f.Parameters.Type = "array" }, []string{`parameters.type: must be "object", got "array"`}},
		{"required", func(f *gym.FunctionSpec) { f.Parameters.Required = []string{"path", "nope", "path"} }, []string{
			`parameters.required[1]: "nope" is not a parameter (properties declares "any", "files", "fix", "level", "max", "opts", "path", "ratio")`,
			`parameters.required[2]: "path" is listed twice`,
		}},
		{"property", func(f *gym.FunctionSpec) {
			f.Parameters.Properties = map[string]gym.Property{
				"a": {Type: "float"},
				"b": {Type: "integer", Enum: []string{"1"}},
				"c": {Type: "array", Items: &gym.Property{Type: "array"}},
				"d": {Type: "boolean", Items: &gym.Property{Type: "string"}},
				"e": {Type: "string", Enum: []string{}},
			}
			f.Parameters.Required = nil
		}, []string{
			`parameters.properties.a.type: must be one of "string", "number", "integer", "boolean", "array", "object", got "float"`,
			`parameters.properties.b.enum: only a string parameter may have an enum, not an integer`,
			`parameters.properties.c.items.type: must be one of "string", "number", "integer", "boolean", got "array"`,
			`parameters.properties.d.items: only an array parameter has items, not a boolean`,
			`parameters.properties.e.enum: empty: no value would be allowed`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := good
			f.Parameters.Required = []string{"path"}
			tc.edit(&f)
			var got []string
			for _, p := range gym.CheckTool(f) {
				got = append(got, p.Error())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}
