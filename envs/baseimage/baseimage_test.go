package baseimage

import (
	"regexp"
	"testing"
)

func TestRecipe(t *testing.T) {
	got := Recipe(Python)
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(got) {
		t.Fatalf("Recipe(%s) = %q, want 16 hex digits", Python, got)
	}
	if again := Recipe(Python); again != got {
		t.Errorf("Recipe is not stable: %q then %q", got, again)
	}
	if Recipe("example.com/not/ours:1") != "" {
		t.Errorf("Recipe of an unknown image is not empty")
	}
	// The recipe covers the import settings as well as the script.
	saved := recipes[Python]
	t.Cleanup(func() { recipes[Python] = saved })
	recipes[Python] = append(append([]string(nil), saved...), "ENV X=1")
	if Recipe(Python) == got {
		t.Errorf("Recipe did not change with the import settings")
	}
}
