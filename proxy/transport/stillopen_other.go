//go:build !unix || aix

package transport

import "net"

// stillOpen reads from an idle connection, waiting at most idleReadWait:
// where there is no Unix peek (Windows, Plan 9, WebAssembly, AIX), Go has
// no portable way to ask a socket whether it has something to read
// without reading it.
func stillOpen(c net.Conn) bool {
	return stillOpenRead(c, idleReadWait)
}
