package transport

import (
	"net"
	"time"
)

// idleReadWait is how long stillOpenRead, on a system without the Unix
// peek, waits for what the server of an idle connection may have sent: it
// is what taking an idle connection costs there, when the server has sent
// nothing.
const idleReadWait = time.Millisecond

// stillOpenRead reports whether an idle connection can carry another
// request, on any system, by reading one byte from it with a read deadline
// wait ahead. A timeout is an open connection with nothing sent; an end
// (EOF), a reset or another error is a connection the server closed, and a
// byte read is one the server sent unasked: neither is reusable, and the
// caller closes it, so a byte read is lost with the connection. The
// deadline is cleared when the connection is open.
//
// The deadline is ahead, not past: with a deadline already past, Go's
// poller fails the read at once without asking the socket, and every
// connection would look open. A caller held up for longer than wait
// between setting the deadline and reading does find it open without
// having looked; then, as when a server closes the connection just after
// any check, the retry rules (retry.go) cover a reused connection found
// closed when the request is sent.
func stillOpenRead(c net.Conn, wait time.Duration) bool {
	if c.SetReadDeadline(time.Now().Add(wait)) != nil {
		return false
	}
	var b [1]byte
	n, err := c.Read(b[:])
	if n > 0 || !isTimeout(err) {
		return false
	}
	return c.SetReadDeadline(time.Time{}) == nil
}
