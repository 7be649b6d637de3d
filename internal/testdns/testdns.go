// Package testdns is a DNS server for tests: one name, whose addresses a
// test sets and changes, as a headless Service's follow its ready pods.
package testdns

import (
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// DNS is a DNS server on loopback that answers A and AAAA queries for
// one name with the addresses Set gives it (IPv4 ones as A records, IPv6
// ones as AAAA), and nothing for any other: a headless Service's name,
// whose addresses are its ready pods (two per pod, when it is
// dual-stack).
type DNS struct {
	Addr string // host:port, UDP and TCP

	name string
	mu   sync.Mutex
	ips  []net.IP
}

// Start serves name (a fully qualified domain name, as "llm.test.")
// with ips until the test ends.
func Start(t testing.TB, name string, ips ...string) *DNS {
	t.Helper()
	d := &DNS{name: dns.Fqdn(strings.ToLower(name))}
	d.Set(ips...)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d.Addr = pc.LocalAddr().String()
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(d.answer)}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return d
}

// Set replaces the name's addresses.
func (d *DNS) Set(ips ...string) {
	var parsed []net.IP
	for _, ip := range ips {
		parsed = append(parsed, net.ParseIP(ip))
	}
	d.mu.Lock()
	d.ips = parsed
	d.mu.Unlock()
}

// answer answers a query: the name's A or AAAA records, with a TTL of 0
// so that no cache keeps them; an error for any other name.
func (d *DNS) answer(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	d.mu.Lock()
	ips := slices.Clone(d.ips)
	d.mu.Unlock()
	for _, question := range q.Question {
		if !strings.EqualFold(question.Name, d.name) {
			m.Rcode = dns.RcodeNameError
			continue
		}
		for _, ip := range ips {
			switch v4 := ip.To4(); {
			case question.Qtype == dns.TypeA && v4 != nil:
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: question.Name, Rrtype: dns.TypeA, Class: dns.ClassINET}, A: v4})
			case question.Qtype == dns.TypeAAAA && v4 == nil:
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: dns.RR_Header{Name: question.Name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET}, AAAA: ip})
			}
		}
	}
	_ = w.WriteMsg(m)
}
