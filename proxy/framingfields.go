package proxy

import (
	"bytes"
	"strconv"
	"strings"
)

// Reading header fields as Go's header reader (net/textproto) does.

// bodyFields are the header fields that frame a request's body, or may
// end HTTP/1 on its connection.
type bodyFields struct {
	fields    int    // all fields
	lengths   int    // Content-Length fields
	length    []byte // the first one's value
	differ    bool   // a later one's value differs
	encodings int    // Transfer-Encoding fields
	encoding  []byte // the first one's value
	upgrade   bool
}

func (h *bodyFields) add(name, value []byte) {
	h.fields++
	switch {
	case asciiEqualFold(name, "Content-Length"):
		value = bytes.Trim(value, " \t")
		if h.lengths == 0 {
			h.length = value
		} else if !bytes.Equal(value, h.length) {
			h.differ = true
		}
		h.lengths++
	case asciiEqualFold(name, "Transfer-Encoding"):
		if h.encodings == 0 {
			h.encoding = value
		}
		h.encodings++
	case asciiEqualFold(name, "Upgrade"):
		h.upgrade = true
	}
}

// contentLength returns the body length Content-Length gives (0 without
// one), and false where Go refuses the request: different values, or one
// that is not a plain decimal number.
func (h *bodyFields) contentLength() (int64, bool) {
	if h.lengths == 0 {
		return 0, true
	}
	n, err := strconv.ParseUint(string(h.length), 10, 63)
	return int64(n), err == nil && !h.differ
}

// eachField calls fn with the name and value of each field of a header
// section (without its blank line), folded lines joined with a space as
// Go's header reader joins them. It returns false where that reader fails.
func eachField(b []byte, fn func(name, value []byte)) bool {
	if len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		return false // the first line cannot start with a space
	}
	for len(b) > 0 {
		var line []byte
		line, b = cutLine(b)
		line = bytes.Trim(line, " \t")
		if bytes.IndexByte(line, ':') < 0 {
			return false // the name must be on the first line
		}
		if len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
			line = append([]byte(nil), line...)
			for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
				var more []byte
				more, b = cutLine(b)
				line = append(append(line, ' '), bytes.Trim(more, " \t")...)
			}
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		if !validFieldName(name) || !validFieldValue(value) {
			return false
		}
		fn(name, bytes.TrimLeft(value, " \t"))
	}
	return true
}

// cutLine returns the first line of b, without its CRLF or LF, and what
// follows it.
func cutLine(b []byte) (line, rest []byte) {
	line, rest, _ = bytes.Cut(b, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), rest
}

// validFieldName: a token, or a token with spaces in it, which Go's
// header reader accepts (uncanonicalized).
func validFieldName(b []byte) bool {
	for _, c := range b {
		if c != ' ' && !isTokenByte(c) {
			return false
		}
	}
	return len(b) > 0
}

func isTokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// validFieldValue: no control bytes but tab.
func validFieldValue(b []byte) bool {
	for _, c := range b {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}
