package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gymserver/gymserver/envs/baseimage"
	"github.com/gymserver/gymserver/envs/docker"
	"github.com/gymserver/gymserver/envs/docker/dockertest"
	"github.com/gymserver/gymserver/envs/sandbox"
)

// archiveSandboxes returns a function that starts sandboxes of one
// prepared image with /workspace as the working directory.
func archiveSandboxes(t *testing.T) func() sandbox.Sandbox {
	t.Helper()
	p, _ := newProvider(t)
	image, err := p.Prepare(t.Context(), sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	return func() sandbox.Sandbox {
		t.Helper()
		sb, err := p.Create(t.Context(), sandbox.Spec{Image: image, WorkDir: "/workspace",
			Labels: map[string]string{sandbox.LabelSession: "s-archive", sandbox.LabelTask: "t"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Close(context.Background()) })
		return sb
	}
}

// sh runs a shell command as the agent and returns its stdout; a non-zero
// exit fails the test unless mayFail.
func sh(t *testing.T, sb sandbox.Sandbox, cmd string, mayFail bool) string {
	t.Helper()
	r, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", cmd}})
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode != 0 && !mayFail {
		t.Fatalf("%s: exit %d: %s", cmd, r.ExitCode, r.Stderr)
	}
	return string(r.Stdout)
}

// archiveOf archives sb and fetches the archive.
func archiveOf(t *testing.T, sb sandbox.Sandbox) []byte {
	t.Helper()
	c, err := sb.(sandbox.Archiver).Archive(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	data, err := c.Fetch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestArchiveFallsBack: what an archive cannot carry makes Archive fail
// with ErrNotArchivable, so that the snapshot is committed instead.
func TestArchiveFallsBack(t *testing.T) {
	start := archiveSandboxes(t)
	tests := []struct {
		name  string
		setup func(t *testing.T, sb sandbox.Sandbox)
		max   int64
		want  string
	}{
		{"too large", func(t *testing.T, sb sandbox.Sandbox) {
			sh(t, sb, "head -c 2000000 /dev/zero > big", false)
		}, 1 << 20, "exceed"},
		{"another user's file", func(t *testing.T, sb sandbox.Sandbox) {
			if err := sb.CopyIn(t.Context(), []sandbox.File{{Path: "/workspace/rootfile", Data: []byte("x")}}); err != nil {
				t.Fatal(err)
			}
		}, 0, "another user"},
		{"fifo", func(t *testing.T, sb sandbox.Sandbox) { sh(t, sb, "mkfifo /tmp/f", false) }, 0, "/tmp/f"},
		{"unreadable", func(t *testing.T, sb sandbox.Sandbox) { sh(t, sb, "echo x > secret && chmod 000 secret", false) }, 0, "secret"},
	}
	for _, tt := range tests {
		t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
			sb := start()
			tt.setup(t, sb)
			_, err := sb.(sandbox.Archiver).Archive(t.Context(), tt.max)
			if !errors.Is(err, sandbox.ErrNotArchivable) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("archive: %v, want ErrNotArchivable mentioning %q", err, tt.want)
			}
		})
	}
}

// TestArchiveRestoresAsTheAgent: a link to a file the agent cannot read
// travels as a link, never as the file's content, and the fork can read
// no more through it than the agent could.
func TestArchiveRestoresAsTheAgent(t *testing.T) {
	start := archiveSandboxes(t)
	src := start()
	sh(t, src, "ln -s /etc/shadow shadow && mkdir -p d/e && echo hi > d/e/f && chmod 500 d", false)
	data := archiveOf(t, src)
	if bytes.Contains(data, []byte("daemon:*:")) {
		t.Fatal("the archive holds /etc/shadow's content")
	}
	dst := start()
	if err := dst.(sandbox.Archiver).Restore(t.Context(), data); err != nil {
		t.Fatal(err)
	}
	got := sh(t, dst, "readlink shadow; cat d/e/f; stat -c '%a %u' d; cat shadow 2>/dev/null || echo denied", false)
	if got != "/etc/shadow\nhi\n500 1000\ndenied\n" {
		t.Errorf("fork: %q", got)
	}
}

// TestRestoreRefusesSmuggling restores hand-made archives, whole and
// delta ones: entries the agent could not have written are refused before
// anything changes, and what is restored belongs to the agent with no
// set-id bits, whatever the archive says.
func TestRestoreRefusesSmuggling(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(fmt.Sprintf("delta=%v", delta), func(t *testing.T) { testRestoreRefusesSmuggling(t, delta) })
	}
}

// The PAX records of a delta archive (see executor's archive).
const (
	paxDelta = "GYMSERVER.delta"
	paxKeep  = "GYMSERVER.keep"
)

func testRestoreRefusesSmuggling(t *testing.T, delta bool) {
	start := archiveSandboxes(t)
	type ent struct {
		name, link string
		typ        byte
		mode       int64
		uid        int
		// pax are records of a delta archive's entry beyond its mark.
		pax map[string]string
	}
	records := func(e ent) map[string]string {
		if !delta {
			return e.pax
		}
		out := map[string]string{paxDelta: "changed"}
		maps.Copy(out, e.pax)
		return out
	}
	build := func(ents ...ent) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: "workspace/", Typeflag: tar.TypeDir, Mode: 0o755, PAXRecords: records(ent{})})
		for _, e := range ents {
			h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Uid: e.uid,
				PAXRecords: records(e), Format: tar.FormatPAX}
			body := "smuggled"
			if e.typ == tar.TypeReg {
				h.Size = int64(len(body))
			}
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if e.typ == tar.TypeReg {
				tw.Write([]byte(body))
			}
		}
		tw.Close()
		return buf.Bytes()
	}
	refused := []struct {
		name string
		ents []ent
	}{
		{"outside", []ent{{name: "etc/evil", typ: tar.TypeReg, mode: 0o644}}},
		{"dot-dot", []ent{{name: "workspace/../etc/evil", typ: tar.TypeReg, mode: 0o644}}},
		{"below a link", []ent{{name: "workspace/l", typ: tar.TypeSymlink, link: "/etc"}, {name: "workspace/l/evil", typ: tar.TypeReg, mode: 0o644}}},
		{"hard link out", []ent{{name: "workspace/h", typ: tar.TypeLink, link: "etc/passwd"}}},
		{"device", []ent{{name: "workspace/null", typ: tar.TypeChar, mode: 0o666}}},
		{"over a root", []ent{{name: "tmp", typ: tar.TypeSymlink, link: "/etc"}}},
		{"orphan", []ent{{name: "workspace/no/such/evil", typ: tar.TypeReg, mode: 0o644}}},
	}
	if delta {
		refused = append(refused, []struct {
			name string
			ents []ent
		}{
			{"kept name up", []ent{{name: "workspace/d", typ: tar.TypeDir, mode: 0o755, pax: map[string]string{paxKeep: "0 0 0 ..\x00"}}}},
			{"kept path", []ent{{name: "workspace/d", typ: tar.TypeDir, mode: 0o755, pax: map[string]string{paxKeep: "0 0 0 a/b\x00"}}}},
			{"kept list on a file", []ent{{name: "workspace/f", typ: tar.TypeReg, mode: 0o644, pax: map[string]string{paxKeep: ""}}}},
			{"pass on a file", []ent{{name: "workspace/f", typ: tar.TypeReg, mode: 0o644, pax: map[string]string{paxDelta: "pass"}}}},
			{"mixed", []ent{{name: "workspace/f", typ: tar.TypeReg, mode: 0o644, pax: map[string]string{paxDelta: ""}}}},
		}...)
	}
	for _, tt := range refused {
		t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
			sb := start()
			sh(t, sb, "echo mine > kept", false)
			err := sb.(sandbox.Archiver).Restore(t.Context(), build(tt.ents...))
			if !errors.Is(err, sandbox.ErrInvalidArchive) {
				t.Fatalf("restore: %v, want ErrInvalidArchive", err)
			}
			if got := sh(t, sb, "cat kept; ls /etc/evil 2>&1 >/dev/null | wc -l", false); got != "mine\n1\n" {
				t.Errorf("after a refused restore: %q", got)
			}
		})
	}
	t.Run("owners_and_modes", func(t *testing.T) {
		sb := start()
		err := sb.(sandbox.Archiver).Restore(t.Context(), build(
			ent{name: "workspace/suid", typ: tar.TypeReg, mode: 0o4755, uid: 0},
			ent{name: "tmp/x", typ: tar.TypeReg, mode: 0o2777, uid: 0}))
		if err != nil {
			t.Fatal(err)
		}
		if got := sh(t, sb, "stat -c '%a %u:%g' suid /tmp/x", false); got != "755 1000:1000\n777 1000:1000\n" {
			t.Errorf("restored owners and modes: %q", got)
		}
	})
}

var _ sandbox.Archiver = (*docker.Sandbox)(nil)

// TestArchiveCarriesChanges: an archive holds what changed since the
// sandbox started, never a file the image had that the agent left alone,
// and a sandbox restored from it has the files the agent left: what it
// deleted (a file of the image, a task file, a folder of task files) is
// gone, a folder replaced by a file and a file by a folder are replaced,
// edits and modes carried.
func TestArchiveCarriesChanges(t *testing.T) {
	p, _ := newProvider(t)
	image, err := p.Prepare(t.Context(), sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	files := []sandbox.File{
		{Path: "/workspace/pkg/a.py", Data: []byte("a = 1\n")},
		{Path: "/workspace/pkg/b.py", Data: []byte("b = 2\n")},
		{Path: "/workspace/old/o.txt", Data: []byte("old\n")},
		{Path: "/workspace/notes.txt", Data: []byte("notes\n")},
	}
	start := func() sandbox.Sandbox {
		t.Helper()
		sb, err := p.Create(t.Context(), sandbox.Spec{Image: image, WorkDir: "/workspace", Files: files,
			Labels: map[string]string{sandbox.LabelSession: "s-archive", sandbox.LabelTask: "t"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Close(context.Background()) })
		return sb
	}
	src := start()
	sh(t, src, `set -e
rm ~/.bashrc pkg/a.py
rm -r old && echo now-a-file > old
rm notes.txt && mkdir notes.txt && echo inside > notes.txt/x
mkdir -p pkg/sub && echo s > pkg/sub/s && chmod 600 pkg/b.py
echo edited >> ~/.profile
echo t > /tmp/t`, false)
	data := archiveOf(t, src)
	names := map[string]bool{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[strings.TrimSuffix(h.Name, "/")] = true
	}
	for _, want := range []string{"workspace/pkg/sub/s", "workspace/old", "workspace/notes.txt/x", "home/agent/.profile", "tmp/t"} {
		if !names[want] {
			t.Errorf("the archive lacks %s (it has %v)", want, names)
		}
	}
	for _, unchanged := range []string{"home/agent/.bash_logout", "home/agent/.bashrc"} {
		if names[unchanged] {
			t.Errorf("the archive holds %s, which the agent did not change", unchanged)
		}
	}
	dst := start()
	if err := dst.(sandbox.Archiver).Restore(t.Context(), data); err != nil {
		t.Fatal(err)
	}
	const listing = `cd / && find workspace home/agent tmp -printf '%p %y %m %u:%g %s %l\n' | sort && ` +
		`find workspace home/agent tmp -type f -exec sha256sum {} + | sort && ` +
		`find workspace home/agent tmp -type f -printf '%p modified %T@\n' | sort`
	want, got := sh(t, src, listing, false), sh(t, dst, listing, false)
	if got != want {
		t.Errorf("restored files differ:\n--- agent's sandbox\n%s--- restored\n%s", want, got)
	}
	for _, gone := range []string{"home/agent/.bashrc", "workspace/pkg/a.py", "workspace/old/o.txt"} {
		if strings.Contains(got, gone) {
			t.Errorf("%s, which the agent deleted, is in the restored sandbox", gone)
		}
	}

	// A restored sandbox is saved and restored in turn (a tree search):
	// what the restore put there counts as changed, and so do the new
	// deletions.
	sh(t, dst, `set -e
rm -r pkg/sub ~/.bash_logout && echo more >> old`, false)
	data = archiveOf(t, dst)
	dst2 := start()
	if err := dst2.(sandbox.Archiver).Restore(t.Context(), data); err != nil {
		t.Fatal(err)
	}
	want, got = sh(t, dst, listing, false), sh(t, dst2, listing, false)
	if got != want {
		t.Errorf("files restored twice differ:\n--- first restored\n%s--- restored from it\n%s", want, got)
	}
	if strings.Contains(got, ".bash_logout") || strings.Contains(got, ".bashrc") || !strings.Contains(got, "workspace/notes.txt/x") {
		t.Errorf("restored twice:\n%s", got)
	}
}

// BenchmarkRestore8 measures the restore part of a fork ×8 from a warm
// pool: an archive of a sandbox whose task files were edited and which
// wrote 1 MB is restored into 8 fresh sandboxes at once (started off the
// clock), as a delta archive (ours) and, in the same iterations, as the
// whole archive of what the agent can write (the baseline, as before
// delta archives). With $GYMSERVER_BASE_EXECUTOR naming a baseline
// executor binary (e.g. built from an earlier commit), the delta archive
// is also restored, in the same iterations, into 8 sandboxes that run it
// (base_delta_p50_ms). Run:
//
//	GYMSERVER_BASE_EXECUTOR=/tmp/base-gymexec go test -run '^$' -bench Restore8 -benchtime 3x ./envs/docker/
func BenchmarkRestore8(b *testing.B) {
	const n = 8
	p, _ := newProvider(b)
	files := []sandbox.File{{Path: "/workspace/app.py", Data: bytes.Repeat([]byte("x = 1\n"), 500)}}
	starter := func(p *docker.Provider) func() sandbox.Sandbox {
		image, err := p.Prepare(b.Context(), sandbox.ImageSpec{BaseImage: baseimage.Python, WorkDir: "/workspace"})
		if err != nil {
			b.Fatal(err)
		}
		return func() sandbox.Sandbox {
			sb, err := p.Create(b.Context(), sandbox.Spec{Image: image, WorkDir: "/workspace", Files: files,
				Labels: map[string]string{sandbox.LabelSession: "s-restore", sandbox.LabelTask: "t"}})
			if err != nil {
				b.Fatal(err)
			}
			return sb
		}
	}
	start := starter(p)
	var startBase func() sandbox.Sandbox
	if bin := os.Getenv("GYMSERVER_BASE_EXECUTOR"); bin != "" {
		bp, _ := dockertest.NewWith(b, docker.Options{ExecutorBinary: bin})
		startBase = starter(bp)
	}
	src := start()
	b.Cleanup(func() { src.Close(context.Background()) })
	r, err := src.Exec(b.Context(), sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c",
		"echo y = 2 >> app.py && mkdir data && head -c 1048576 /dev/urandom > data/f"}})
	if err != nil || r.ExitCode != 0 {
		b.Fatalf("write: %v %+v", err, r)
	}
	c, err := src.(sandbox.Archiver).Archive(b.Context(), 0)
	if err != nil {
		b.Fatal(err)
	}
	delta, err := c.Fetch(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	whole, err := docker.WholeArchive(b.Context(), src)
	if err != nil {
		b.Fatal(err)
	}
	restore8 := func(start func() sandbox.Sandbox, data []byte) time.Duration {
		b.StopTimer()
		sbs := make([]sandbox.Sandbox, n)
		var g errgroup.Group
		for i := range sbs {
			g.Go(func() error { sbs[i] = start(); return nil })
		}
		g.Wait()
		b.StartTimer()
		t0 := time.Now()
		for _, sb := range sbs {
			g.Go(func() error { return sb.(sandbox.Archiver).Restore(b.Context(), data) })
		}
		err := g.Wait()
		took := time.Since(t0)
		b.StopTimer()
		for _, sb := range sbs {
			g.Go(func() error { return sb.Close(context.Background()) })
		}
		g.Wait()
		b.StartTimer()
		if err != nil {
			b.Fatal(err)
		}
		return took
	}
	if startBase != nil {
		// Off the clock: the baseline's provider asks its executor for
		// the image's roots once, as ours did when src was archived.
		sb := startBase()
		err := sb.(sandbox.Archiver).Restore(b.Context(), delta)
		sb.Close(context.Background())
		if err != nil {
			b.Fatal(err)
		}
	}
	var deltaLat, wholeLat, baseLat []time.Duration
	for b.Loop() {
		deltaLat = append(deltaLat, restore8(start, delta))
		if startBase != nil {
			baseLat = append(baseLat, restore8(startBase, delta))
		}
		wholeLat = append(wholeLat, restore8(start, whole))
	}
	b.ReportMetric(median(deltaLat), "delta_p50_ms")
	if startBase != nil {
		b.ReportMetric(median(baseLat), "base_delta_p50_ms")
		b.Logf("delta restores (ms), ours %v, base %v; %s", msList(deltaLat), msList(baseLat), loadavg())
	}
	b.ReportMetric(median(wholeLat), "whole_p50_ms")
	b.ReportMetric(float64(len(delta))/1024, "delta_KB")
	b.ReportMetric(float64(len(whole))/1024, "whole_KB")
}

// msList lists durations in milliseconds.
func msList(lat []time.Duration) []float64 {
	out := make([]float64, len(lat))
	for i, d := range lat {
		out[i] = ms(d)
	}
	return out
}

// median returns the median in milliseconds.
func median(lat []time.Duration) float64 {
	s := slices.Clone(lat)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}
