package streamtest

import (
	"embed"
	"path"
	"testing"
)

//go:embed testdata/native/*.ndjson testdata/native/*.sse testdata/native/*.json
var native embed.FS

// ReadNative returns the native-API fixture named name (a file of
// testdata/native, whose README says which are recorded and which
// composed).
func ReadNative(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := native.ReadFile(path.Join("testdata", "native", name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
