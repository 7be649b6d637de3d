//go:build unix && !aix

package transport

import (
	"net"
	"syscall"
)

// stillOpen peeks at an idle connection without blocking: a server that
// closed it has sent its end (or a reset); one that keeps it sends
// nothing. The peek (recv with MSG_PEEK|MSG_DONTWAIT) is Unix's; other
// systems, and AIX, whose syscall package has no MSG_DONTWAIT, read
// instead (stillopen_other.go).
func stillOpen(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing to read (EAGAIN) is an open, idle connection; bytes a
		// server sent unasked, an end or an error are not.
		open = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true
	})
	return err == nil && open
}
