package executor

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"
)

// TestFrameRoundTrip encodes frames of every size class, with and without
// large byte slices, and reads them back.
func TestFrameRoundTrip(t *testing.T) {
	big := make([]byte, 1<<20+123)
	rand.Read(big)
	reqs := []request{
		{ID: 1, Op: opPing},
		{ID: 2, Op: opRestore, Roots: []Root{{Path: "/workspace", Dir: true}}, Data: big},
		{ID: 3, Op: opExec, Argv: []string{"/bin/sh", "-c", "cat"}, Stdin: big[:70000], Env: []string{"A=1"}},
		{ID: 4, Op: opInstall, Files: []installFile{{Path: "/a", Data: big[:5000]}, {Path: "/b", Data: []byte{}, Mode: 0o755}}},
	}
	for _, req := range reqs {
		frame, err := encodeFrame(req)
		if err != nil {
			t.Fatalf("encode %s: %v", req.Op, err)
		}
		if n := binary.BigEndian.Uint32(frame); int(n) != len(frame)-4 {
			t.Errorf("%s: length %d, body %d bytes", req.Op, n, len(frame)-4)
		}
		want, err := msgpack.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(frame[4:], want) {
			t.Errorf("%s: body differs from msgpack.Marshal's", req.Op)
		}
		var got request
		if err := readFrame(bytes.NewReader(frame), &got); err != nil {
			t.Fatalf("read %s: %v", req.Op, err)
		}
		if diff := cmp.Diff(req, got, cmp.Comparer(bytes.Equal)); diff != "" {
			t.Errorf("%s: round trip (-sent +read):\n%s", req.Op, diff)
		}
	}
	resp := response{ID: 9, Data: big, Stdout: big[:10], Roots: []Root{{Path: "/tmp", Dir: true}}}
	frame, err := encodeFrame(resp)
	if err != nil {
		t.Fatal(err)
	}
	var got response
	if err := readFrame(bytes.NewReader(frame), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(resp, got, cmp.Comparer(bytes.Equal)); diff != "" {
		t.Errorf("response round trip (-sent +read):\n%s", diff)
	}
}

// TestFrameTooLarge checks that a frame over MaxFrame is refused when it is
// encoded, also when its byte slices alone are under MaxFrame.
func TestFrameTooLarge(t *testing.T) {
	for _, n := range []int{MaxFrame, MaxFrame - 4} {
		_, err := encodeFrame(request{ID: 1, Op: opRestore, Data: make([]byte, n)})
		if !errors.Is(err, errFrameTooLarge) {
			t.Errorf("%d bytes of data: %v, want %v", n, err, errFrameTooLarge)
		}
	}
	if _, err := encodeFrame(request{ID: 1, Op: opRestore, Data: make([]byte, MaxFrame-64)}); err != nil {
		t.Errorf("a frame just under MaxFrame: %v", err)
	}
}

// TestReadFrameText checks that a stream of text where frames should be
// (a wrong executor command printing its usage) reads as such, and that a
// binary header over MaxFrame stays a plain refusal.
func TestReadFrameText(t *testing.T) {
	var resp response
	err := readFrame(strings.NewReader("Usage: gymserver <command>\n"), &resp)
	if !errors.Is(err, errFrameTooLarge) || !strings.Contains(err.Error(), `the stream holds text ("Usag"...)`) {
		t.Errorf("text: %v", err)
	}
	err = readFrame(bytes.NewReader([]byte{0xff, 0, 0, 0}), &resp)
	if !errors.Is(err, errFrameTooLarge) || strings.Contains(err.Error(), "text") {
		t.Errorf("a binary header over MaxFrame: %v", err)
	}
}

// TestReadArchiveFileData checks the content readArchive gives each file:
// in place for plain files, expanded for a PAX sparse one, and a refusal
// for a file cut short.
func TestReadArchiveFileData(t *testing.T) {
	roots := []Root{{Path: "/w", Dir: true}}
	big := make([]byte, 1<<20+7)
	rand.Read(big)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := []struct {
		name string
		data []byte
	}{{"w/empty", nil}, {"w/big", big}, {"w/small", []byte("hello\n")}}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.data))}); err != nil {
			t.Fatal(err)
		}
		tw.Write(f.data)
	}
	tw.Flush() // no end blocks yet: a sparse entry follows
	buf.Write(paxSparseEntry("w/sparse", 3000, 2048, []byte("tail")))
	buf.Write(make([]byte, 1024)) // end of archive
	data := buf.Bytes()

	ents, _, err := readArchive(roots, data)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	for _, e := range ents {
		got[e.h.Name] = e.data
	}
	want := map[string][]byte{"w/empty": {}, "w/big": big, "w/small": []byte("hello\n"),
		"w/sparse": append(make([]byte, 2048), append([]byte("tail"), make([]byte, 3000-2048-4)...)...)}
	if diff := cmp.Diff(want, got, cmp.Comparer(bytes.Equal)); diff != "" {
		t.Errorf("file contents (-want +got):\n%s", diff)
	}
	// A plain file's content is the archive's own bytes, and no append
	// to it can reach the next entry.
	if b := got["w/big"]; cap(b) != len(b) || &b[0] != &data[1024] {
		t.Errorf("w/big is not the archive's bytes in place (len %d cap %d)", len(b), cap(b))
	}

	// Cut inside the big file: refused, whatever the tar reader sees.
	for _, n := range []int{1024 + 100, 1024 + len(big) - 1} {
		if _, _, err := readArchive(roots, data[:n]); !isKind(err, kindInvalidArchive) || !strings.Contains(err.Error(), "w/big") {
			t.Errorf("archive cut at %d bytes: %v, want an error about w/big", n, err)
		}
	}
}

// isKind reports whether err is a kindError of kind.
func isKind(err error, kind string) bool {
	var ke *kindError
	return errors.As(err, &ke) && ke.kind == kind
}

// paxSparseEntry is a PAX 1.0 sparse file entry (as GNU tar writes one):
// size bytes of which only data, at off, is stored.
func paxSparseEntry(name string, size, off int64, data []byte) []byte {
	var pax strings.Builder
	for _, kv := range [][2]string{{"GNU.sparse.major", "1"}, {"GNU.sparse.minor", "0"},
		{"GNU.sparse.name", name}, {"GNU.sparse.realsize", fmt.Sprint(size)}} {
		pax.WriteString(paxRecord(kv[0], kv[1]))
	}
	sparseMap := fmt.Sprintf("1\n%d\n%d\n", off, len(data))
	stored := pad(append([]byte(sparseMap), make([]byte, 512-len(sparseMap))...))
	stored = append(stored, pad(data)...)
	var out []byte
	out = append(out, ustarBlock("PaxHeaders/"+name, 'x', int64(pax.Len()))...)
	out = append(out, pad([]byte(pax.String()))...)
	out = append(out, ustarBlock("GNUSparseFile.0/"+name, tar.TypeReg, int64(512+len(data)))...)
	return append(out, stored...)
}

// paxRecord is one PAX record: its length in decimal, which counts itself.
func paxRecord(k, v string) string {
	rec := " " + k + "=" + v + "\n"
	n := len(rec)
	for len(fmt.Sprint(n))+len(rec) != n {
		n = len(fmt.Sprint(n)) + len(rec)
	}
	return fmt.Sprint(n) + rec
}

// pad pads b with zeros to a whole number of 512-byte blocks.
func pad(b []byte) []byte {
	return append(b, make([]byte, (512-len(b)%512)%512)...)
}

// ustarBlock is a ustar header block.
func ustarBlock(name string, typ byte, size int64) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	copy(b[100:108], "0000644\x00")
	copy(b[108:116], "0000000\x00")
	copy(b[116:124], "0000000\x00")
	copy(b[124:136], fmt.Sprintf("%011o\x00", size))
	copy(b[136:148], "00000000000\x00")
	b[156] = typ
	copy(b[257:265], "ustar\x0000")
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// BenchmarkEncodeFrame measures the encoding of a restore request of a
// 1 MB archive: ours (one buffer, sized up front) beside the baseline
// (msgpack.Marshal, then the body appended after the length).
func BenchmarkEncodeFrame(b *testing.B) {
	req := request{ID: 7, Op: opRestore, Roots: []Root{{Path: "/workspace", Dir: true}, {Path: "/tmp", Dir: true}},
		Data: make([]byte, 1<<20+16<<10)}
	arms := []struct {
		name string
		fn   func(any) ([]byte, error)
	}{{"ours", encodeFrame}, {"base", encodeFrameMarshal}}
	for _, a := range arms {
		b.Run(a.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(req.Data)))
			for b.Loop() {
				if _, err := a.fn(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// encodeFrameMarshal is how encodeFrame worked before: the baseline of
// BenchmarkEncodeFrame.
func encodeFrameMarshal(v any) ([]byte, error) {
	body, err := msgpack.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(out, uint32(len(body)))
	return append(out, body...), nil
}

// TestFrameStream reads large and small frames back to back from one
// stream, as the executor and the client do, and checks the end cases of
// a large frame: cut short, malformed, or with bytes after its value.
func TestFrameStream(t *testing.T) {
	big := make([]byte, streamFrame+1000)
	rand.Read(big)
	sent := []request{
		{ID: 1, Op: opRestore, Data: big},
		{ID: 2, Op: opPing},
		{ID: 3, Op: opWrite, Path: "/x", Data: big[:streamFrame-100]},
		{ID: 4, Op: opRestore, Data: big[:5]},
		{ID: 5, Op: opWrite, Path: "/y", Data: big},
	}
	var stream bytes.Buffer
	for _, req := range sent {
		frame, err := encodeFrame(req)
		if err != nil {
			t.Fatal(err)
		}
		stream.Write(frame)
	}
	whole := bytes.Clone(stream.Bytes())
	// One byte at a time, so that the decoder's reads are short.
	r := iotest.OneByteReader(&stream)
	for _, want := range sent {
		var got request
		if err := readFrame(r, &got); err != nil {
			t.Fatalf("frame %d: %v", want.ID, err)
		}
		if diff := cmp.Diff(want, got, cmp.Comparer(bytes.Equal)); diff != "" {
			t.Errorf("frame %d (-sent +read):\n%s", want.ID, diff)
		}
	}
	if err := readFrame(r, new(request)); err != io.EOF {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}

	// Cut inside the first (large) frame's body.
	for _, cut := range []int{5, 100, len(big) / 2, len(big) + 20} {
		err := readFrame(bytes.NewReader(whole[:cut]), new(request))
		if err != io.ErrUnexpectedEOF {
			t.Errorf("stream cut at %d bytes: %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}

	// A large body that is not a msgpack map, then a good frame: an
	// error, and the next frame still reads from its start.
	junk := make([]byte, 4+streamFrame)
	binary.BigEndian.PutUint32(junk, streamFrame)
	junk[4] = 0xc1 // never used in msgpack
	ping, _ := encodeFrame(request{ID: 9, Op: opPing})
	r2 := bytes.NewReader(append(junk, ping...))
	if err := readFrame(r2, new(request)); err == nil || !strings.Contains(err.Error(), "decode frame") {
		t.Errorf("junk frame: %v, want a decode error", err)
	}
	var got request
	if err := readFrame(r2, &got); err != nil || got.ID != 9 || got.Op != opPing {
		t.Errorf("frame after the junk: %v, %+v", err, got)
	}

	// Bytes after the value inside a large frame are skipped.
	body, _ := msgpack.Marshal(request{ID: 10, Op: opPing})
	padded := make([]byte, 4, 4+streamFrame)
	binary.BigEndian.PutUint32(padded, streamFrame)
	padded = append(padded, body...)
	padded = append(padded, make([]byte, streamFrame-len(body))...)
	r3 := bytes.NewReader(append(padded, ping...))
	for _, id := range []uint64{10, 9} {
		var got request
		if err := readFrame(r3, &got); err != nil || got.ID != id {
			t.Errorf("frame %d: %v, read id %d", id, err, got.ID)
		}
	}
}
