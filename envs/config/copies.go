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

// systemDirs are folders of the sandbox's own system. A hidden_tests
// destination must be none of them and contain none of them, because
// evaluation removes it before it copies the tests in.
var systemDirs = []string{
	"/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
	"/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp",
	"/usr", "/usr/bin", "/usr/include", "/usr/lib", "/usr/local", "/usr/local/bin",
	"/usr/local/lib", "/usr/sbin", "/usr/share", "/var", "/var/lib", "/var/tmp",
	"/.gymserver",
}

// foreignDirs hold the kernel's files and gymserver's own: no hidden test
// may go anywhere below them.
var foreignDirs = []string{"/dev", "/proc", "/sys", "/.gymserver"}

// checkDestinations checks where the copies of one environment land
// against each other. Evaluation removes every hidden_tests destination and
// copies the hidden tests in, so a destination that holds anything else
// (the working directory, files of copy_folders or of the reference
// solution, another hidden-test destination, the system) is a mistake.
func (d *decoder) checkDestinations(workdir string, copies, hidden, refs []copyEntry) {
	workdir = filepath.Clean(workdir)
	absWorkdir := strings.HasPrefix(workdir, "/")
	for i, h := range hidden {
		dest, p := h.spec.Dest, h.destPath
		if dest == "/" {
			d.fail(p, "must not be /: evaluation removes the destination before it installs the tests")
			continue
		}
		if dir, ok := firstUnder(systemDirs, dest); ok {
			d.fail(p, "%q contains the system folder %s: evaluation removes the destination before it installs the tests", dest, dir)
			continue
		}
		if dir, ok := containing(foreignDirs, dest); ok {
			d.fail(p, "%q is inside %s, which is not for task files", dest, dir)
			continue
		}
		if absWorkdir && inside(workdir, dest) {
			if workdir == dest {
				d.fail(p, "%q is the working_directory: evaluation would remove the agent's work", dest)
			} else {
				d.fail(p, "%q contains the working_directory %q: evaluation would remove the agent's work", dest, workdir)
			}
		}
		for _, c := range copies {
			if inside(c.spec.Dest, dest) {
				d.fail(p, "%q overlaps %s %q: evaluation would remove the copied files", dest, c.destPath, c.spec.Dest)
			} else if f, ok := firstUnder(c.files, dest); ok {
				// c copies into a folder above dest: only the files that
				// land in dest collide.
				d.fail(p, "%q overlaps %s, which copies %s there: evaluation would replace it with the hidden tests", dest, c.destPath, f)
			}
		}
		for _, o := range hidden[:i] {
			if inside(dest, o.spec.Dest) || inside(o.spec.Dest, dest) {
				d.fail(p, "%q overlaps %s %q: hidden-test destinations must not contain one another", dest, o.destPath, o.spec.Dest)
			}
		}
	}
	for _, r := range refs {
		for _, h := range hidden {
			if f, ok := firstUnder(r.files, h.spec.Dest); ok {
				d.fail(r.destPath, "writes %s inside %s %q: evaluation would replace it with the hidden tests", f, h.destPath, h.spec.Dest)
			}
		}
	}
}

// inside reports whether p is root or below it; both are clean absolute
// sandbox paths.
func inside(p, root string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

// firstUnder returns the first of paths that is root or below it.
func firstUnder(paths []string, root string) (string, bool) {
	for _, p := range paths {
		if inside(p, root) {
			return p, true
		}
	}
	return "", false
}

// containing returns the first of dirs that p is, or is below.
func containing(dirs []string, p string) (string, bool) {
	for _, dir := range dirs {
		if inside(p, dir) {
			return dir, true
		}
	}
	return "", false
}
