package envs

import (
	"encoding/json"
	"fmt"

	"github.com/gymserver/gymserver/envs/config"
	"github.com/gymserver/gymserver/gym"
)

// ReferenceCalls returns the tool calls that apply the task's reference
// solution: a write_file per reference file (copied ones, then inline
// ones), an execute_command per reference command, then mark_done. It reads
// the files from the host now.
func ReferenceCalls(t config.Task) ([]gym.ToolCall, error) {
	if t.Reference == nil {
		return nil, fmt.Errorf("task %s: no reference_solution: %w", t.ID, gym.ErrNotFound)
	}
	var calls []gym.ToolCall
	add := func(name string, args any) {
		b, _ := json.Marshal(args) // plain structs of strings always marshal
		calls = append(calls, gym.NewToolCall(fmt.Sprintf("ref_%d", len(calls)), name, string(b)))
	}
	for _, c := range t.Reference.Files {
		files, err := c.Files()
		if err != nil {
			return nil, fmt.Errorf("task %s: reference file %s: %w", t.ID, c.Src, err)
		}
		for _, f := range files {
			add(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: f.Path, Content: string(f.Data)})
		}
	}
	for _, f := range t.Reference.Contents {
		add(gym.ToolWriteFile, gym.WriteFileArgs{Filepath: f.Path, Content: f.Content})
	}
	for _, cmd := range t.Reference.Commands {
		add(gym.ToolExecuteCommand, gym.ExecuteCommandArgs{Command: cmd})
	}
	add(gym.ToolMarkDone, gym.MarkDoneArgs{Message: "reference solution applied"})
	return calls, nil
}
