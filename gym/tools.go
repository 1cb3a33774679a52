package gym

import (
	"encoding/json"
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
