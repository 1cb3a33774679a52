package config

import (
	"encoding/json"
	"io/fs"
	"path/filepath"
	"strings"
)

// copyEntry is a decoded copy with what the checks across fields need.
type copyEntry struct {
	spec CopySpec
	// srcPath and destPath are the config paths its errors name.
	srcPath, destPath string
	// files are the sandbox paths of the files it places.
	files []string
}

// copySpec reads a copy entry: a bare path (the folder goes into workdir
// under its own name) or {"src", "dest"}. It walks the source as Files
// will, so a source that cannot be copied whole fails here.
func (d *decoder) copySpec(path string, raw json.RawMessage, workdir string) (copyEntry, bool) {
	ce := copyEntry{srcPath: join(path, "src"), destPath: join(path, "dest")}
	c := &ce.spec
	var s string
	if json.Unmarshal(raw, &s) == nil {
		c.Src = s
	} else {
		obj, ok := d.object(path, raw)
		if !ok {
			return ce, false
		}
		d.apply(path, obj, fields{"src": d.str(&c.Src), "dest": d.str(&c.Dest)})
	}
	if c.Src == "" {
		d.fail(path, "missing src")
		return ce, false
	}
	if !filepath.IsAbs(c.Src) {
		c.Src = filepath.Join(d.dir, c.Src)
	}
	st, err := followStat(c.Src)
	if err != nil {
		d.fail(ce.srcPath, "%v", err)
		return ce, false
	}
	if c.Dest == "" {
		c.Dest = workdir + "/" + filepath.Base(c.Src)
	} else if !strings.HasPrefix(c.Dest, "/") {
		c.Dest = workdir + "/" + c.Dest
	}
	c.Dest = filepath.Clean(c.Dest)
	switch {
	case st.IsDir() && c.Dest == "/":
		d.fail(ce.destPath, "must not be /")
		return ce, false
	case !st.IsDir() && strings.HasPrefix(workdir, "/") && inside(filepath.Clean(workdir), c.Dest):
		d.fail(ce.destPath, "%q: a file there would replace the working_directory %q", c.Dest, workdir)
		return ce, false
	}
	err = c.walk(func(_, dest string, _ fs.FileInfo) error {
		ce.files = append(ce.files, dest)
		return nil
	})
	if err != nil {
		d.fail(ce.srcPath, "%v", err)
		return ce, false
	}
	if len(ce.files) == 0 {
		d.fail(ce.srcPath, "%s: no files to copy (folders named __pycache__, .git and .pytest_cache are left out)", c.Src)
		return ce, false
	}
	return ce, true
}

// inside reports whether p is root or below it; both are clean absolute
// sandbox paths.
func inside(p, root string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}
