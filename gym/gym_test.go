package gym_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gymserver/gymserver/gym"
)

func TestClassOf(t *testing.T) {
	inner := fmt.Errorf("session s1: %w", gym.ErrNotFound)
	tests := []struct {
		name string
		err  error
		want gym.ErrorClass
	}{
		{"nil", nil, gym.ClassNone},
		{"plain", errors.New("boom"), gym.ClassInternal},
		{"sentinel", gym.ErrSandbox, gym.ClassSandbox},
		{"wrapped", fmt.Errorf("step 3: %w", gym.ErrEpisodeDone), gym.ClassEpisodeDone},
		{"errorf", gym.Errorf(gym.ClassAgent, "bad %s", "thing"), gym.ClassAgent},
		{"outermost wins", gym.Classify(inner, gym.ClassSandbox), gym.ClassSandbox},
		{"inner kept", fmt.Errorf("outer: %w", inner), gym.ClassNotFound},
		{"joined", errors.Join(errors.New("x"), gym.ErrVerifier), gym.ClassVerifier},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := gym.ClassOf(tt.err); got != tt.want {
				t.Errorf("ClassOf(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
	// Classify keeps the message and the chain.
	err := gym.Classify(inner, gym.ClassSandbox)
	if err.Error() != inner.Error() || !errors.Is(err, gym.ErrNotFound) || !errors.Is(err, gym.ErrSandbox) {
		t.Errorf("Classify lost information: %v", err)
	}
	if gym.Classify(nil, gym.ClassAgent) != nil {
		t.Error("Classify(nil) != nil")
	}
}

func TestSentinelRoundTrip(t *testing.T) {
	for _, c := range []gym.ErrorClass{gym.ClassAgent, gym.ClassToolTimeout, gym.ClassSandbox, gym.ClassVerifier,
		gym.ClassPolicy, gym.ClassInvalidArgument, gym.ClassNotFound, gym.ClassEpisodeDone,
		gym.ClassResourceExhausted, gym.ClassUnavailable, gym.ClassUnauthenticated, gym.ClassInternal} {
		if got := gym.ClassOf(gym.Sentinel(c)); got != c {
			t.Errorf("Sentinel(%q) classifies as %q", c, got)
		}
	}
	if gym.ClassOf(gym.Sentinel("bogus")) != gym.ClassInternal {
		t.Error("unknown class is not internal")
	}
	if !gym.Masked(gym.ClassSandbox) || gym.Masked(gym.ClassAgent) || gym.Masked(gym.ClassToolTimeout) {
		t.Error("mask hints wrong")
	}
}

func TestDurationJSON(t *testing.T) {
	b, err := json.Marshal(gym.Duration(1500 * time.Millisecond))
	if err != nil || string(b) != "1.5" {
		t.Fatalf("marshal = %s, %v", b, err)
	}
	var d gym.Duration
	if err := json.Unmarshal([]byte("2.25"), &d); err != nil || time.Duration(d) != 2250*time.Millisecond {
		t.Fatalf("unmarshal = %v, %v", time.Duration(d), err)
	}
}

func TestStandardToolsSchema(t *testing.T) {
	tools := gym.StandardTools()
	names := map[string]bool{}
	for _, tool := range tools {
		names[tool.Function.Name] = true
		b, err := json.Marshal(tool)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		// OpenAI function format with flat parameters and required present.
		for _, want := range []string{`"type":"function"`, `"parameters":{"type":"object"`, `"required":[`} {
			if !strings.Contains(s, want) {
				t.Errorf("%s schema lacks %s: %s", tool.Function.Name, want, s)
			}
		}
		for _, r := range tool.Function.Parameters.Required {
			if _, ok := tool.Function.Parameters.Properties[r]; !ok {
				t.Errorf("%s requires undeclared %q", tool.Function.Name, r)
			}
		}
	}
	for _, n := range []string{gym.ToolExecuteCommand, gym.ToolWriteFile, gym.ToolReadFile, gym.ToolMarkDone} {
		if !names[n] {
			t.Errorf("missing tool %s", n)
		}
	}
	ec := tools[0].Function.Parameters.Properties
	for _, p := range []string{"command", "timeout", "working_directory", "background"} {
		if _, ok := ec[p]; !ok {
			t.Errorf("execute_command lacks parameter %s", p)
		}
	}
}

func TestTerminationReasonTruncation(t *testing.T) {
	for r, want := range map[gym.TerminationReason]bool{
		gym.ReasonCompleted: false, gym.ReasonEvaluated: false,
		gym.ReasonMaxActions: true, gym.ReasonTimeout: true, gym.ReasonSandboxError: true,
	} {
		if r.Truncation() != want {
			t.Errorf("%s.Truncation() = %v", r, !want)
		}
	}
}

func TestStepInfoMask(t *testing.T) {
	for _, tt := range []struct {
		name string
		info gym.StepInfo
		want bool
	}{
		{"agent error", gym.StepInfo{Calls: []gym.CallInfo{{ErrorClass: gym.ClassAgent}}}, false},
		{"sandbox error call", gym.StepInfo{Calls: []gym.CallInfo{{}, {ErrorClass: gym.ClassSandbox}}}, true},
		{"masked evaluation", gym.StepInfo{Evaluation: &gym.Evaluation{Mask: true}}, true},
		{"scored evaluation", gym.StepInfo{Evaluation: &gym.Evaluation{Reward: 0.5}}, false},
		{"sandbox ended it", gym.StepInfo{TerminationReason: gym.ReasonSandboxError}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.info.Mask(); got != tt.want {
				t.Errorf("Mask() = %v, want %v", got, tt.want)
			}
		})
	}
}
