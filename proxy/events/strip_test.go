package events

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/itlproxy/itlproxy/proxy/internal/streamtest"
)

// strip reads in through a UsageStripper, in reads of chunks.
func strip(t *testing.T, max int, chunks [][]byte) string {
	t.Helper()
	var readers []io.Reader
	for _, c := range chunks {
		readers = append(readers, bytes.NewReader(c))
	}
	got, err := io.ReadAll(NewUsageStripper(io.NopCloser(io.MultiReader(readers...)), max, 4096))
	if err != nil {
		t.Fatal(err)
	}
	return string(got)
}

// TestUsageStripperKeepsWhatItDoesNotOwn: however the stream is cut, the
// stripper takes out the usage-only chunk whole (a "\r\n" line end cut in
// two included) and the "usage":null members, and passes everything else
// as it came: comments, other fields, events whose data is on several
// lines, events past the bound, and a stream cut inside an event.
func TestUsageStripperKeepsWhatItDoesNotOwn(t *testing.T) {
	long := `{"choices":[],"usage":{"completion_tokens":1},"pad":"` + strings.Repeat("x", 80) + `"}`
	for _, c := range []struct {
		name, in, want string
		max            int
	}{
		{
			"CRLF",
			"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\r\n\r\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\r\n\r\n" +
				"\r\ndata: [DONE]\r\n\r\n",
			"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n\r\n" +
				"\r\ndata: [DONE]\r\n\r\n",
			1 << 10,
		},
		{
			"kept as sent",
			": c\n\nid: 1\nevent: x\n\ndata: {\"choices\":[],\ndata: \"usage\":{\"completion_tokens\":2}}\n\n" +
				"data: " + long + "\n\n" + "data: {\"usage\":null",
			": c\n\nid: 1\nevent: x\n\ndata: {\"choices\":[],\ndata: \"usage\":{\"completion_tokens\":2}}\n\n" +
				"data: " + long + "\n\n" + "data: {\"usage\":null",
			64,
		},
	} {
		for how, chunks := range streamtest.Cuts([]byte(c.in)) {
			if got := strip(t, c.max, chunks); got != c.want {
				t.Fatalf("%s, %s: %q, want %q", c.name, how, got, c.want)
			}
		}
	}
}
