package gym

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
)

// Names of the standard tools, as the seed named them.
const (
	ToolExecuteCommand = "execute_command"
	ToolWriteFile      = "write_file"
	ToolReadFile       = "read_file"
	ToolMarkDone       = "mark_done"
)

// ExecuteCommandArgs are the arguments of execute_command.
type ExecuteCommandArgs struct {
	Command string `json:"command"`
	// Timeout in seconds; 0 uses the task's command timeout, larger values
	// are capped at it.
	Timeout          float64 `json:"timeout,omitempty"`
	WorkingDirectory string  `json:"working_directory,omitempty"`
	// Background starts the command and returns at once; the process is
	// tracked and killed before evaluation.
	Background bool `json:"background,omitempty"`
}

// WriteFileArgs are the arguments of write_file.
type WriteFileArgs struct {
	Filepath string `json:"filepath"`
	Content  string `json:"content"`
}

// ReadFileArgs are the arguments of read_file.
type ReadFileArgs struct {
	Filepath string `json:"filepath"`
}

// MarkDoneArgs are the arguments of mark_done.
type MarkDoneArgs struct {
	Message string `json:"message,omitempty"`
}

// StandardTools returns the schemas of the four standard tools.
func StandardTools() []Tool {
	return []Tool{
		FuncTool(ToolExecuteCommand,
			"Run a shell command (/bin/sh -c) in the sandbox and return its exit code, stdout and stderr. Long outputs are cut in the middle.",
			[]string{"command"},
			Param("command", "string", "The shell command to run."),
			Param("timeout", "number", "Timeout in seconds; the task's command timeout is both the default and the maximum."),
			Param("working_directory", "string", "Directory to run in; defaults to the task's working directory."),
			Param("background", "boolean", "Start the command in the background and return immediately (for servers). Background processes are stopped before evaluation."),
		),
		FuncTool(ToolWriteFile,
			"Write content to a file, creating parent directories; an existing file is replaced.",
			[]string{"filepath", "content"},
			Param("filepath", "string", "Path of the file, absolute or relative to the working directory."),
			Param("content", "string", "The complete new content of the file."),
		),
		FuncTool(ToolReadFile,
			"Read a text file and return its content.",
			[]string{"filepath"},
			Param("filepath", "string", "Path of the file, absolute or relative to the working directory."),
		),
		FuncTool(ToolMarkDone,
			"Declare the task finished. The episode ends and the hidden tests are run.",
			[]string{},
			Param("message", "string", "Optional summary of what was done."),
		),
	}
}

// NamedProperty is a parameter name with its schema, for FuncTool.
type NamedProperty struct {
	Name string
	Property
}

// Param returns a parameter of the given JSON type.
func Param(name, typ, description string) NamedProperty {
	return NamedProperty{Name: name, Property: Property{Type: typ, Description: description}}
}

// FuncTool builds a function tool with flat parameters. required is never
// nil in the result, so it always appears in JSON.
func FuncTool(name, description string, required []string, params ...NamedProperty) Tool {
	props := make(map[string]Property, len(params))
	for _, p := range params {
		props[p.Name] = p.Property
	}
	if required == nil {
		required = []string{}
	}
	return Tool{Type: "function", Function: FunctionSpec{
		Name:        name,
		Description: description,
		Parameters:  Schema{Type: "object", Properties: props, Required: required},
	}}
}

// DecodeArguments decodes the raw JSON arguments of a call of the tool
// named name into v, holding them to the tool's schema: they must be a JSON
// object, and when the schema does not allow additional properties (as
// every standard tool's does not) an argument it does not declare is
// refused rather than ignored. Empty arguments count as an empty object, as
// some models send them for tools without parameters. Errors wrap ErrAgent
// and tell the agent what the tool takes.
func DecodeArguments(name string, schema Schema, arguments string, v any) error {
	raw := strings.TrimSpace(arguments)
	if raw == "" {
		raw = "{}"
	}
	var obj map[string]json.RawMessage // null leaves it nil: no arguments
	if err := json.Unmarshal([]byte(raw), &obj); err != nil {
		return Errorf(ClassAgent, "%s: arguments are not a valid JSON object of the tool's parameters: %v", name, err)
	}
	if !schema.AdditionalProperties {
		var unknown []string
		for k := range obj {
			if _, ok := schema.Properties[k]; !ok {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			slices.Sort(unknown)
			return Errorf(ClassAgent, "%s: unknown argument %s; the tool takes only %s",
				name, quoteJoin(unknown), quoteJoin(schema.propertyNames()))
		}
	}
	if err := json.Unmarshal([]byte(raw), v); err != nil {
		return Errorf(ClassAgent, "%s: arguments are not a valid JSON object of the tool's parameters: %v", name, err)
	}
	return nil
}

// propertyNames returns the schema's parameter names, sorted.
func (s Schema) propertyNames() []string {
	names := make([]string, 0, len(s.Properties))
	for k := range s.Properties {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// quoteJoin returns the names quoted and separated by commas.
func quoteJoin(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = `"` + n + `"`
	}
	return strings.Join(q, ", ")
}

// IsStandardTool reports whether name is the name of a standard tool, which
// a custom tool may not take.
func IsStandardTool(name string) bool {
	switch name {
	case ToolExecuteCommand, ToolWriteFile, ToolReadFile, ToolMarkDone:
		return true
	}
	return false
}

// toolName is what OpenAI-compatible APIs accept as a function name.
var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// scalarTypes are the JSON Schema types of a single value.
var scalarTypes = []string{"string", "number", "integer", "boolean"}

// propertyTypes are the types a parameter may have.
var propertyTypes = append(slices.Clone(scalarTypes), "array", "object")

// ToolProblem is one problem of a custom tool's description. Path names
// the field at fault below the function ("name", "parameters.required[0]",
// "parameters.properties.path.type").
type ToolProblem struct {
	Path    string
	Message string
}

// Error returns "path: message".
func (p ToolProblem) Error() string { return p.Path + ": " + p.Message }

// CheckTool returns the problems of a custom tool's function description,
// nil when it is sound: a name APIs accept ([A-Za-z0-9_-], at most 64) that
// no standard tool has, a description, and parameters of type "object"
// whose properties have a known type (Property), enums only on strings,
// items only on arrays and themselves scalars, and whose required names
// are declared properties, each once.
func CheckTool(f FunctionSpec) []ToolProblem {
	var out []ToolProblem
	fail := func(path, format string, args ...any) {
		out = append(out, ToolProblem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	switch {
	case f.Name == "":
		fail("name", "missing")
	case !toolName.MatchString(f.Name):
		fail("name", "%q: use letters, digits, '_' and '-' (at most 64), as model APIs require", f.Name)
	case IsStandardTool(f.Name):
		fail("name", "%q is a standard tool; choose another name", f.Name)
	}
	if strings.TrimSpace(f.Description) == "" {
		fail("description", "missing: the model reads it to know what the tool does")
	}
	s := f.Parameters
	if s.Type != "object" {
		fail("parameters.type", "must be \"object\", got %q", s.Type)
	}
	for _, name := range s.propertyNames() {
		p := s.Properties[name]
		path := "parameters.properties." + name
		if name == "" {
			fail(path, "a parameter needs a name")
		}
		checkProperty(path, p, propertyTypes, fail)
		if p.Items != nil {
			checkProperty(path+".items", *p.Items, scalarTypes, fail)
		}
	}
	seen := map[string]bool{}
	for i, r := range s.Required {
		path := fmt.Sprintf("parameters.required[%d]", i)
		switch {
		case seen[r]:
			fail(path, "%q is listed twice", r)
		case !hasProperty(s, r):
			fail(path, "%q is not a parameter (properties declares %s)", r, orNone(s.propertyNames()))
		}
		seen[r] = true
	}
	return out
}

func hasProperty(s Schema, name string) bool {
	_, ok := s.Properties[name]
	return ok
}

// checkProperty checks one parameter's schema against the allowed types.
func checkProperty(path string, p Property, types []string, fail func(string, string, ...any)) {
	if !slices.Contains(types, p.Type) {
		fail(path+".type", "must be one of %s, got %q", quoteJoin(types), p.Type)
		return
	}
	if len(p.Enum) > 0 && p.Type != "string" {
		fail(path+".enum", "only a string parameter may have an enum, not %s", article(p.Type))
	}
	if p.Enum != nil && len(p.Enum) == 0 {
		fail(path+".enum", "empty: no value would be allowed")
	}
	if p.Items != nil && p.Type != "array" {
		fail(path+".items", "only an array parameter has items, not %s", article(p.Type))
	}
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return quoteJoin(names)
}

// CheckArguments holds the raw JSON arguments of a call of the tool named
// name to the tool's schema and returns them as compact JSON: they must be
// a JSON object (empty arguments count as {}), declare no argument the
// schema does not (unless it allows additional properties), give every
// required argument, and give each a value of its declared type (an enum
// member for a string with an enum, elements of the items type for an
// array). The result keeps the arguments as written, only without
// insignificant white space. Errors wrap ErrAgent and tell the agent what
// is wrong.
func CheckArguments(name string, schema Schema, arguments string) (string, error) {
	var obj map[string]json.RawMessage
	if err := DecodeArguments(name, schema, arguments, &obj); err != nil {
		return "", err
	}
	var missing []string
	for _, r := range schema.Required {
		if _, ok := obj[r]; !ok {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		return "", Errorf(ClassAgent, "%s: missing required argument %s", name, quoteJoin(missing))
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p, ok := schema.Properties[k]
		if !ok {
			continue // allowed by additionalProperties
		}
		if msg := valueProblem(p, obj[k]); msg != "" {
			return "", Errorf(ClassAgent, "%s: argument %q %s", name, k, msg)
		}
	}
	if obj == nil || strings.TrimSpace(arguments) == "" {
		return "{}", nil
	}
	var out bytes.Buffer
	if err := json.Compact(&out, []byte(arguments)); err != nil {
		return "", Errorf(ClassAgent, "%s: arguments: %v", name, err)
	}
	return out.String(), nil
}

// valueProblem says how raw fails p, or "" when it fits.
func valueProblem(p Property, raw json.RawMessage) string {
	var v any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "is not valid JSON"
	}
	want := "must be " + article(p.Type)
	switch p.Type {
	case "string":
		s, ok := v.(string)
		if !ok {
			return want + ", got " + jsonKind(v)
		}
		if len(p.Enum) > 0 && !slices.Contains(p.Enum, s) {
			return fmt.Sprintf("must be one of %s, got %q", quoteJoin(p.Enum), s)
		}
	case "number", "integer":
		n, ok := v.(json.Number)
		if !ok {
			return want + ", got " + jsonKind(v)
		}
		if p.Type == "integer" {
			if f, err := n.Float64(); err != nil || f != math.Trunc(f) {
				return want + ", got " + n.String()
			}
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return want + ", got " + jsonKind(v)
		}
	case "object":
		if _, ok := v.(map[string]any); !ok {
			return want + ", got " + jsonKind(v)
		}
	case "array":
		if _, ok := v.([]any); !ok {
			return want + ", got " + jsonKind(v)
		}
		if p.Items == nil {
			return ""
		}
		var elems []json.RawMessage
		_ = json.Unmarshal(raw, &elems)
		for i, e := range elems {
			if msg := valueProblem(*p.Items, e); msg != "" {
				return fmt.Sprintf("element %d %s", i, msg)
			}
		}
	}
	return ""
}

// article returns the type with "a" or "an".
func article(typ string) string {
	if typ == "array" || typ == "object" || typ == "integer" {
		return "an " + typ
	}
	return "a " + typ
}

// jsonKind names the JSON type of a decoded value.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
