package events

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDecodeString(t *testing.T) {
	for _, c := range []struct {
		raw   string
		limit int
		want  string
	}{
		{`plain`, -1, "plain"},
		{`a\"b\\c\/d\b\f\n\r\t`, -1, "a\"b\\c/d\b\f\n\r\t"},
		{`\u0072\u006F\u006c\u0065`, -1, "role"},
		{`\ud83d\ude00!`, -1, "😀!"},
		{`\ud83d!`, -1, "\uFFFD!"},           // a lone high surrogate
		{`\ude00\ud83d`, -1, "\uFFFD\uFFFD"}, // a low one first
		{`\ud83d\u0041`, -1, "\uFFFDA"},      // a high one and no low one
		{"a\xffb\xc3", -1, "a\uFFFDb\uFFFD"}, // invalid UTF-8, each byte U+FFFD
		{`\x41`, -1, ""},                     // no such escape
		{`\u00g1`, -1, ""},                   // not hexadecimal
		{`\u00`, -1, ""},                     // cut short
		{`a\`, -1, ""},                       // a backslash at the end
		{"a\\n\x01b", -1, ""},                // a control character, once decoding
		{`abcdef`, 4, "abcd"},                // the limit
		{`ab\u00e9`, 3, "ab"},                // é does not fit whole
		{`ab\u00e9`, 4, "abé"},               //
		{"abé", 3, "ab"},                     // raw, é does not fit whole
		{"a\xffb", 3, "a"},                   // U+FFFD takes three bytes
		{`a\ud83d\ude00`, 4, "a"},            // a pair does not fit
		{strings.Repeat(`\u0041`, 2000), 1024, strings.Repeat("A", 1024)},
	} {
		if got := decodeString([]byte(c.raw), c.limit); got != c.want {
			t.Errorf("decodeString(%q, %d) = %q, want %q", c.raw, c.limit, got, c.want)
		}
	}
}

// FuzzDecodeString holds the string decoder to encoding/json: where a
// string's contents are valid JSON, the same text, and its cut is the
// same text's first bytes at a character boundary.
func FuzzDecodeString(f *testing.F) {
	for _, seed := range []string{`plain`, `a\"b\\c\/d\b\f\n\r\t`, `\u0072ole`, `\ud83d\ude00`, `\ud83d`, `\ud83d\u0041`, "a\xffb", "é日本"} {
		f.Add([]byte(seed), 3)
	}
	f.Fuzz(func(t *testing.T, raw []byte, limit int) {
		limit = limit%64 - 1 // -1 (none) to 62
		got := decodeString(raw, limit)
		var want string
		if json.Unmarshal([]byte(`"`+string(raw)+`"`), &want) != nil {
			return
		}
		if limit >= 0 {
			want = firstBytes(want, limit)
		}
		if got != want {
			t.Fatalf("decodeString(%q, %d) = %q; encoding/json reads %q", raw, limit, got, want)
		}
	})
}
