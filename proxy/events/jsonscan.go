package events

import (
	"bytes"
	"math"
)

// jsonScan reads one JSON text forward, finding the few fields itlproxy
// needs without decoding the rest and without allocating: every event of
// every stream passes through it, so encoding/json's reflection and
// allocations per chunk would dominate the proxy's cost.
//
// It is strict about structure (brackets, commas, colons, literals) where
// it walks and lenient inside values it skips (it matches brackets there
// but does not check commas). Once it meets something malformed it sets
// bad, jumps to the end, and every later call is a no-op, so callers' loops
// end and they check bad once.
type jsonScan struct {
	b   []byte
	i   int
	bad bool
	// scratch is where a key or a string compared is decoded when it
	// holds an escape.
	scratch [maxKeyBytes]byte
}

func (s *jsonScan) fail() {
	s.bad = true
	s.i = len(s.b)
}

// peek skips white space and returns the next byte, or 0 at the end.
func (s *jsonScan) peek() byte {
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return c
		}
	}
	return 0
}

// open consumes c, which must be '{' or '['.
func (s *jsonScan) open(c byte) bool {
	if s.peek() != c {
		s.fail()
		return false
	}
	s.i++
	return true
}

// more reports whether the object or array being read (closed by end) has
// another member, consuming the comma before it, or the closing bracket
// when there is none. n counts the members seen so far.
func (s *jsonScan) more(end byte, n *int) bool {
	c := s.peek()
	switch {
	case c == end:
		s.i++
		return false
	case *n == 0:
		if c == 0 {
			s.fail()
			return false
		}
	case c == ',':
		s.i++
		if c := s.peek(); c == end || c == 0 {
			s.fail()
			return false
		}
	default:
		s.fail()
		return false
	}
	*n++
	return true
}

// key reads an object member's name and its colon. A name with escapes
// (which no server sends, but JSON allows) is decoded into the scan's
// scratch; one that does not fit there, or is not a JSON string's
// contents, is returned raw, and matches no name the readers look for
// (none holds a backslash).
func (s *jsonScan) key() []byte {
	k := s.str()
	if s.peek() != ':' {
		s.fail()
		return nil
	}
	s.i++
	if bytes.IndexByte(k, '\\') >= 0 {
		if d, n := appendUnescaped(s.scratch[:0], k, len(s.scratch)); n == len(k) {
			return d
		}
	}
	return k
}

// str reads a string and returns its raw contents, escapes undecoded. An
// escape always stands for at least one character, so a non-empty raw
// string is a non-empty string.
func (s *jsonScan) str() []byte {
	if s.peek() != '"' {
		s.fail()
		return nil
	}
	start := s.i + 1
	quote := -1 // index of the next '"' at or after j, once known
	for j := start; j < len(s.b); {
		if quote < j {
			q := bytes.IndexByte(s.b[j:], '"')
			if q < 0 {
				break
			}
			quote = j + q
		}
		e := bytes.IndexByte(s.b[j:quote], '\\')
		if e < 0 {
			s.i = quote + 1
			return s.b[start:quote]
		}
		j += e + 2 // the escaped byte cannot end the string
	}
	s.fail()
	return nil
}

// nonEmptyString reads a value and reports whether it is a string with at
// least one character. Any other value (null above all) is skipped.
func (s *jsonScan) nonEmptyString() bool {
	if s.peek() != '"' {
		s.skip()
		return false
	}
	return len(s.str()) > 0
}

// stringOrSkip reads a value: a string's contents, or nil after skipping
// any other value.
func (s *jsonScan) stringOrSkip() []byte {
	if s.peek() != '"' {
		s.skip()
		return nil
	}
	return s.str()
}

// present reads a value and reports whether it was anything but null.
func (s *jsonScan) present() bool {
	if s.null() {
		return false
	}
	s.skip()
	return true
}

// null consumes a null and reports whether it was one; otherwise it
// consumes nothing.
func (s *jsonScan) null() bool {
	if s.peek() == 'n' {
		s.literal("null")
		return !s.bad
	}
	return false
}

// maxCountDigits bounds the integers int reads: no token count has more.
const maxCountDigits = 15

// int reads a non-negative integer of at most maxCountDigits digits.
// Anything else (a fraction, an exponent, a string, null) is skipped and
// reported as -1.
func (s *jsonScan) int() int64 {
	if c := s.peek(); c < '0' || c > '9' {
		s.skip()
		return -1
	}
	start := s.i
	var n int64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		n = n*10 + int64(s.b[s.i]-'0')
		s.i++
		if s.i-start > maxCountDigits {
			break
		}
	}
	if s.i-start > maxCountDigits || s.i < len(s.b) && isNumberByte(s.b[s.i]) {
		s.i = start
		s.skip()
		return -1
	}
	return n
}

func (s *jsonScan) literal(lit string) {
	if !bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
		s.fail()
		return
	}
	s.i += len(lit)
}

func isNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// skip consumes one value of any kind. Containers are skipped by matching
// brackets without recursion, so deep nesting costs no stack.
func (s *jsonScan) skip() {
	switch c := s.peek(); c {
	case '"':
		s.str()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				s.str()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return
				}
			}
			s.i++
		}
		s.fail()
	case 't':
		s.literal("true")
	case 'f':
		s.literal("false")
	case 'n':
		s.literal("null")
	default:
		start := s.i
		for s.i < len(s.b) && isNumberByte(s.b[s.i]) {
			s.i++
		}
		if s.i == start {
			s.fail()
		}
	}
}

// end checks that nothing but white space follows the value read.
func (s *jsonScan) end() bool {
	if s.peek() != 0 {
		s.fail()
	}
	return !s.bad
}

// number reads a non-negative JSON number (engines report durations as
// fractions of milliseconds), or skips any other value and returns -1.
func (s *jsonScan) number() float64 {
	if c := s.peek(); c < '0' || c > '9' {
		s.skip()
		return -1
	}
	start := s.i
	v, scale := 0.0, 0.0
	inExp, exp, expSign := false, 0, 1
	for ; s.i < len(s.b) && isNumberByte(s.b[s.i]); s.i++ {
		c := s.b[s.i]
		switch {
		case c == '.' && scale == 0 && !inExp:
			scale = 1
		case (c == 'e' || c == 'E') && !inExp:
			inExp = true
		case inExp && c == '-':
			expSign = -1
		case inExp && c == '+':
		case c < '0' || c > '9' || exp > 400:
			s.i = start
			s.skip()
			return -1
		case inExp:
			exp = exp*10 + int(c-'0')
		case scale > 0:
			scale *= 10
			v += float64(c-'0') / scale
		default:
			v = v*10 + float64(c-'0')
		}
	}
	return v * math.Pow10(expSign*exp)
}
