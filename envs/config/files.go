package config

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/gymserver/gymserver/envs/sandbox"
)

// skipDirs are never copied into a sandbox.
var skipDirs = map[string]bool{"__pycache__": true, ".git": true, ".pytest_cache": true}

// Files reads the copy's source from the host and returns the files to
// place in the sandbox: one for a file, every regular file below it for a
// folder. Executable files keep mode 0755, others get 0644.
func (c CopySpec) Files() ([]sandbox.File, error) {
	st, err := os.Stat(c.Src)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		data, err := os.ReadFile(c.Src)
		if err != nil {
			return nil, err
		}
		return []sandbox.File{{Path: c.Dest, Data: data, Mode: fileMode(st.Mode())}}, nil
	}
	var files []sandbox.File
	var total int64
	err = filepath.WalkDir(c.Src, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.IsDir() {
			if p != c.Src && skipDirs[de.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !de.Type().IsRegular() {
			return nil // symlinks and devices are not copied
		}
		info, err := de.Info()
		if err != nil {
			return err
		}
		total += info.Size()
		if total > maxCopyBytes {
			return fmt.Errorf("more than %d MiB to copy", maxCopyBytes>>20)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(c.Src, p)
		if err != nil {
			return err
		}
		files = append(files, sandbox.File{Path: path.Join(c.Dest, filepath.ToSlash(rel)), Data: data, Mode: fileMode(info.Mode())})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return files, nil
}

func fileMode(m fs.FileMode) fs.FileMode {
	if m&0o111 != 0 {
		return 0o755
	}
	return 0o644
}
