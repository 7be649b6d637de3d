package events

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// A JSON string's contents, decoded as encoding/json decodes them, without
// it: a key with an escape costs what a plain one does, where a general
// decoder per key made a body of escaped keys cost ten times its plain
// twin.

// maxKeyBytes is the room a jsonScan has to decode a key into: more than
// the longest name a reader looks for. A longer key, decoded, is none of
// them.
const maxKeyBytes = 64

// maxNameBytes bounds what InspectRequest decodes of "model" and "user":
// no model name or user id is longer, and a client's megabytes there cost
// the proxy nothing per request. The model's label (metrics) and the ids
// the proxy keeps (metrics.KeepID) are bounded tighter still.
const maxNameBytes = 1 << 10

// appendUnescaped appends to dst the decoded contents of raw (a JSON
// string between its quotes): escapes decoded, a lone surrogate and each
// byte of invalid UTF-8 as U+FFFD, as encoding/json decodes them. With
// limit >= 0 it stops before a character that would take dst past limit
// bytes, so that dst is cut at a character boundary. n is how many bytes
// of raw it decoded (len(raw) when all), or -1 when raw is not a JSON
// string's contents: a bad escape, a quote or a control character.
func appendUnescaped(dst, raw []byte, limit int) (out []byte, n int) {
	i := 0
	for i < len(raw) {
		c := raw[i]
		r, size := rune(c), 1
		switch {
		case c == '\\':
			r, size = unescape(raw[i:])
			if size == 0 {
				return dst, -1
			}
		case c == '"' || c < ' ':
			return dst, -1
		case c >= utf8.RuneSelf:
			r, size = utf8.DecodeRune(raw[i:])
		}
		if r < utf8.RuneSelf {
			if limit >= 0 && len(dst) >= limit {
				return dst, i
			}
			dst = append(dst, byte(r))
			i += size
			continue
		}
		if limit >= 0 && len(dst)+utf8.RuneLen(r) > limit {
			return dst, i
		}
		dst = utf8.AppendRune(dst, r)
		i += size
	}
	return dst, i
}

// unescape decodes the escape at the start of b: the character and how
// many bytes of b it took, 0 for an escape JSON does not have. A \u
// escape of a surrogate takes the next one with it when the two make a
// pair, and is U+FFFD alone.
func unescape(b []byte) (rune, int) {
	if len(b) < 2 {
		return 0, 0
	}
	switch c := b[1]; c {
	case '"', '\\', '/':
		return rune(c), 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		r := hex4(b[2:])
		switch {
		case r < 0:
			return 0, 0
		case !utf16.IsSurrogate(r):
			return r, 6
		}
		if len(b) >= 12 && b[6] == '\\' && b[7] == 'u' {
			if pair := utf16.DecodeRune(r, hex4(b[8:])); pair != utf8.RuneError {
				return pair, 12
			}
		}
		return utf8.RuneError, 6
	}
	return 0, 0
}

// hex4 reads four hexadecimal digits, -1 when b does not start with them.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// decodeString decodes the raw contents of a JSON string as encoding/json
// does, its first limit bytes at most (cut at a character boundary; no
// limit when limit < 0); "" when raw, once it has to be decoded (it holds
// an escape or invalid UTF-8), is not a JSON string's contents. Like the
// scan, it checks no more than it reads: a string with neither is taken
// as it is.
func decodeString(raw []byte, limit int) string {
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		if limit >= 0 && len(raw) > limit {
			n := limit
			for n > 0 && !utf8.RuneStart(raw[n]) {
				n--
			}
			raw = raw[:n]
		}
		return string(raw)
	}
	size := len(raw)
	if limit >= 0 {
		size = min(size, limit)
	}
	out, n := appendUnescaped(make([]byte, 0, size), raw, limit)
	if n < 0 {
		return ""
	}
	return string(out)
}
