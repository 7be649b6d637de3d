// Package streamtest holds what the tests of proxy and proxy/events share:
// the recorded streams (testdata/streams, and the native APIs' in
// testdata/native, each described in its README), the
// ways of cutting a stream into reads, and the per-event benchmark report.
// Only tests import it.
package streamtest

import (
	"embed"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path"
	"strings"
	"testing"
)

//go:embed testdata/streams/*.sse
var recorded embed.FS

// Names returns the file names of the recorded streams, sorted.
func Names() []string {
	entries, _ := fs.ReadDir(recorded, "testdata/streams")
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// Read returns the recorded stream named name (a file name of Names).
func Read(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := recorded.ReadFile(path.Join("testdata", "streams", name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// Events cuts an event stream after each blank line, so that each chunk
// is one event.
func Events(stream string) [][]byte {
	var out [][]byte
	for len(stream) > 0 {
		i := strings.Index(stream, "\n\n")
		if i < 0 {
			out = append(out, []byte(stream))
			break
		}
		out = append(out, []byte(stream[:i+2]))
		stream = stream[i+2:]
	}
	return out
}

// Cuts returns the ways a test feeds in: whole, cut in two at every byte
// boundary, one byte at a time, and cut at random points.
func Cuts(in []byte) map[string][][]byte {
	out := map[string][][]byte{"whole": {in}}
	for i := 1; i < len(in); i++ {
		out[fmt.Sprintf("split at %d", i)] = [][]byte{in[:i], in[i:]}
	}
	var bytewise [][]byte
	for i := range in {
		bytewise = append(bytewise, in[i:i+1])
	}
	out["byte by byte"] = bytewise
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 42))
		var parts [][]byte
		for rest := in; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(7))
			parts = append(parts, rest[:n])
			rest = rest[n:]
		}
		out[fmt.Sprintf("random %d", seed)] = parts
	}
	return out
}
