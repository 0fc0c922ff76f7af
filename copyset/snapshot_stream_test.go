package copyset

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// testStream is a FileStream of fixed files that reserves twice what they
// take.
type testStream struct {
	files  [][2]string
	closed bool
}

func (s *testStream) Reserve() int64 {
	var n int64
	for _, f := range s.files {
		n += 2 * int64(len(f[0])+10+len(f[1]))
	}
	return n
}

func (s *testStream) Next() (string, []byte, error) {
	if len(s.files) == 0 {
		return "", nil, io.EOF
	}
	f := s.files[0]
	s.files = s.files[1:]
	return f[0], []byte(f[1]), nil
}

func (s *testStream) Close() error { s.closed = true; return nil }

// TestSnapshotMachineStream: a Streamer's files travel as its stream
// yields them, after the live files; the unused reserve pads the stream
// to the size announced ahead, Padding reports exactly that tail, and the
// follower stages the streamed files and nothing of the padding.
func TestSnapshotMachineStream(t *testing.T) {
	src, _ := testSnapStore(t)
	os.WriteFile(filepath.Join(src.dataDir, "live"), []byte("live bytes"), 0o644)
	st := &testStream{files: [][2]string{{"m/one", "first image"}, {"m/two", string(bytes.Repeat([]byte{7}, 5000))}}}
	meta, rc := openLocalSnapshotOf(t, src, []snapSource{{names: []string{"live"}}, {kind: 9, stream: st}})
	sr := rc.(*snapReader)
	var body bytes.Buffer
	buf := make([]byte, 700)
	padAt := int64(-1)
	for {
		if p := sr.Padding(); p > 0 && padAt < 0 {
			padAt = int64(body.Len())
			if p != meta.Size-padAt {
				t.Fatalf("padding %d at %d of %d", p, padAt, meta.Size)
			}
		}
		n, err := rc.Read(buf)
		body.Write(buf[:n])
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if int64(body.Len()) != meta.Size || padAt <= 0 {
		t.Fatalf("read %d of %d bytes, padding from %d", body.Len(), meta.Size, padAt)
	}
	if tail := body.Bytes()[padAt:]; !bytes.Equal(tail, make([]byte, len(tail))) {
		t.Fatal("padding is not zeros")
	}
	rc.Close()
	if !st.closed {
		t.Fatal("the machine stream was not closed with the reader")
	}

	dst, _ := testSnapStore(t)
	sink, _ := dst.Create(1, meta.Index, meta.Term, raft.Configuration{}, 1, nil)
	if _, err := io.Copy(sink, &body); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dst.install(dst.takePending()); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"live": "live bytes", "m/one": "first image", "m/two": string(bytes.Repeat([]byte{7}, 5000))} {
		if got, err := os.ReadFile(filepath.Join(dst.dataDir, name)); err != nil || string(got) != want {
			t.Errorf("%s: %d bytes, %v", name, len(got), err)
		}
	}
}

// TestSnapshotStreamOverReserve: a stream that yields more than it
// reserved fails the read instead of sending a longer snapshot than
// announced.
func TestSnapshotStreamOverReserve(t *testing.T) {
	st := &testStream{files: [][2]string{{"x", "0123456789"}}}
	sr := &snapReader{body: &streamSections{s: st}, size: 5}
	if _, err := io.ReadAll(sr); err == nil {
		t.Fatal("read past the reserve succeeded")
	}
}

// TestInboundSnapshotPad: a message's pad becomes that many zeros after
// its data, up to the announced size.
func TestInboundSnapshotPad(t *testing.T) {
	chunks := make(chan inboundSnapshotChunk, 1)
	chunks <- inboundSnapshotChunk{data: []byte("yz"), pad: 6}
	r := &inboundSnapshotReader{buf: []byte("abc"), remaining: 11, chunks: chunks, idle: 5e9}
	got, err := io.ReadAll(r)
	if err != nil || string(got) != "abcyz\x00\x00\x00\x00\x00\x00" {
		t.Fatalf("read %q, %v", got, err)
	}
}
