package transport

import (
	"io"
	"net"
	"testing"
	"time"
)

// idlePair returns the client's end of a loopback connection, and the
// server's, once the server has done act with its end and what that sent
// has had time to reach the client.
func idlePair(t *testing.T, act func(server *net.TCPConn)) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		s, _ := ln.Accept()
		accepted <- s
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	if server = <-accepted; server == nil {
		t.Fatal("the server accepted no connection")
	}
	t.Cleanup(func() { server.Close() })
	act(server.(*net.TCPConn))
	time.Sleep(20 * time.Millisecond) // what act sent reaches the client
	return client, server
}

// idleCases are what the server of an idle connection may have done with
// it, and whether the connection can carry another request.
var idleCases = []struct {
	name string
	act  func(server *net.TCPConn)
	open bool
}{
	{"kept open", func(*net.TCPConn) {}, true},
	{"closed by the server", func(s *net.TCPConn) { s.Close() }, false},
	{"reset by the server", func(s *net.TCPConn) { _ = s.SetLinger(0); s.Close() }, false},
	{"stray bytes", func(s *net.TCPConn) { _, _ = s.Write([]byte("HTTP/1.1 200 OK\r\n")) }, false},
}

// checkIdle runs check on a connection in each of idleCases' states. One
// found open must have had nothing taken from it and no deadline left on
// it: it reads what its server sends next.
func checkIdle(t *testing.T, check func(net.Conn) bool, within time.Duration) {
	for _, tc := range idleCases {
		t.Run(tc.name, func(t *testing.T) {
			client, server := idlePair(t, tc.act)
			start := time.Now()
			open := check(client)
			took := time.Since(start)
			if open != tc.open {
				t.Fatalf("open = %v, want %v", open, tc.open)
			}
			if !open && took >= within {
				t.Errorf("took %v to find it closed: want it to look at what the server sent, not wait %v", took, within)
			}
			if !open {
				return
			}
			go func() { _, _ = server.Write([]byte("next")) }()
			buf := make([]byte, 4)
			if _, err := io.ReadFull(client, buf); err != nil || string(buf) != "next" {
				t.Errorf("after the check, the client reads %q, %v; want %q", buf, err, "next")
			}
		})
	}
}

// TestStillOpen checks this system's stillOpen: the Unix peek, or else
// the read of stillOpenRead.
func TestStillOpen(t *testing.T) {
	checkIdle(t, stillOpen, time.Second)
}

// TestStillOpenRead checks the read other systems than Unix use, called
// directly so that it runs on every system. Its wait here is longer than
// idleReadWait so that nothing but what the server did decides the
// result (a read that starts after its deadline finds the connection
// open without looking).
func TestStillOpenRead(t *testing.T) {
	const wait = 200 * time.Millisecond
	checkIdle(t, func(c net.Conn) bool { return stillOpenRead(c, wait) }, wait)
	t.Run("kept open, idleReadWait", func(t *testing.T) {
		client, _ := idlePair(t, func(*net.TCPConn) {})
		if !stillOpenRead(client, idleReadWait) {
			t.Error("an open connection found closed")
		}
	})
}
