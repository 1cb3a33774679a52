package envs

import (
	"bufio"
	"bytes"
	"strings"

	"github.com/gymserver/gymserver/envs/executor"
	"github.com/gymserver/gymserver/envs/sandbox"
)

// importPunct spaces out the punctuation of an import line.
var importPunct = strings.NewReplacer(",", " , ", "(", " ", ")", " ", ";", " ; ", "\\", " ")

// testImports returns the names of the modules the Python files among
// files import (`import a.b, c as d`; `from a.b import c, d`, which may
// name the modules a.b.c and a.b.d), in order, each once, at most
// executor.MaxPreload. Relative imports are left out. It reads lines, not
// Python: an import spread over several lines gives only its first line's
// names, and an import in a string counts. The names are what the
// verifier zygote may preload, and it preloads only the standard library
// modules it allows (see sandbox.ZygoteOptions), so a name too many costs
// nothing and a name missed costs only the time to import it in the test
// run.
func testImports(files []sandbox.File) []string {
	var names []string
	seen := map[string]bool{}
	// Only names a zygote op takes (executor.CheckPreload).
	add := func(n string) {
		if executor.ModuleName(n) && !seen[n] && len(names) < executor.MaxPreload {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, f := range files {
		if !strings.HasSuffix(f.Path, ".py") {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(f.Data))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line, _, _ := strings.Cut(sc.Text(), "#")
			words := strings.Fields(importPunct.Replace(line))
			if len(words) < 2 {
				continue
			}
			switch words[0] {
			case "import":
				// import a.b [as x], c [as y]
				for i := 1; i < len(words) && words[i] != ";"; i++ {
					if i == 1 || words[i-1] == "," {
						add(words[i])
					}
				}
			case "from":
				// from a.b import c [as x], d
				mod := words[1]
				if !executor.ModuleName(mod) || len(words) < 4 || words[2] != "import" {
					continue
				}
				add(mod)
				for i := 3; i < len(words) && words[i] != ";"; i++ {
					if (i == 3 || words[i-1] == ",") && !strings.Contains(words[i], ".") {
						add(mod + "." + words[i])
					}
				}
			}
		}
	}
	return names
}
