package main

import "net"

// sendBufferListener sets the kernel send buffer (SO_SNDBUF) of every
// connection it accepts. Unset, Linux grows a connection's send buffer up
// to net.ipv4.tcp_wmem's maximum (4 MiB by default): a client that reads
// slowly then parks megabytes in the kernel, and the proxy keeps reading
// from the upstream far ahead of what the reader has seen.
type sendBufferListener struct {
	net.Listener
	bytes int
}

func (l sendBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(l.bytes)
	}
	return c, err
}
