package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/internal/testdns"
)

// events records what a Set tells.
type events struct {
	mu       sync.Mutex
	resolved [][]string // the addresses of each Resolved
	removed  [][]string
	failed   []error
	ejected  []string
	leftOut  [][]string
}

func addrs(servers []*Server) []string {
	var out []string
	for _, sv := range servers {
		out = append(out, sv.Addr)
	}
	slices.Sort(out)
	return out
}

func (ev *events) Resolved(servers, removed []*Server) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	ev.resolved = append(ev.resolved, addrs(servers))
	ev.removed = append(ev.removed, addrs(removed))
}

func (ev *events) ResolveFailed(err error) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	ev.failed = append(ev.failed, err)
}

func (ev *events) Ejected(sv *Server, _ time.Duration) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	ev.ejected = append(ev.ejected, sv.Addr)
}

func (ev *events) LeftOut(addrs []string) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	ev.leftOut = append(ev.leftOut, addrs)
}

// static is NewStatic, which the test expects to succeed.
func static(t *testing.T, o Options, raw ...string) *Set {
	t.Helper()
	s, err := NewStatic(mustURLs(t, raw...), o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustURLs(t *testing.T, raw ...string) []*url.URL {
	t.Helper()
	var out []*url.URL
	for _, r := range raw {
		u, err := url.Parse(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

// A fixed list: each URL's host with its port (the scheme's when it names
// none), an address listed twice once, labels up to the cap and "_other"
// past it.
func TestStaticSet(t *testing.T) {
	ev := &events{}
	s := static(t, Options{MaxLabels: 2, Events: ev}, "http://10.0.0.1:8000", "https://llm.example", "http://10.0.0.1:8000", "http://10.0.0.3")
	servers := s.Servers()
	if got, want := addrs(servers), []string{"10.0.0.1:8000", "10.0.0.3:80", "llm.example:443"}; !slices.Equal(got, want) {
		t.Fatalf("servers %v, want %v", got, want)
	}
	labels := map[string]int{}
	for _, sv := range servers {
		labels[sv.Label()]++
		if sv.Label() != LabelOther && sv.Label() != sv.Addr {
			t.Errorf("%s labelled %q", sv.Addr, sv.Label())
		}
		if sv.Addr == "llm.example:443" && sv.Host != "llm.example" {
			t.Errorf("%s carries Host %q", sv.Addr, sv.Host)
		}
	}
	if labels[LabelOther] != 1 || len(labels) != 3 {
		t.Errorf("labels %v: want two servers of their own and one %q", labels, LabelOther)
	}
	if len(ev.resolved) != 1 {
		t.Errorf("Resolved told %d times, want once", len(ev.resolved))
	}
	s.Run(context.Background()) // a fixed set has nothing to run: returns at once
}

// The least of two random choices: a server with more requests in
// flight than every other is never picked while there are three; with
// equal counts every server gets its share.
func TestPickBalancesByInFlight(t *testing.T) {
	s := static(t, Options{MaxLabels: 8}, "http://a:1", "http://b:1", "http://c:1")
	servers := s.Servers()
	busy := servers[1]
	for range 5 {
		busy.Acquire()
	}
	picked := map[string]int{}
	for range 3000 {
		picked[s.Pick(nil).Addr]++
	}
	if picked[busy.Addr] != 0 {
		t.Errorf("the busiest server was picked %d times of 3000: %v", picked[busy.Addr], picked)
	}
	for range 5 {
		busy.Release()
	}
	if busy.InFlight() != 0 {
		t.Fatalf("in flight %d after as many releases as acquires", busy.InFlight())
	}
	clear(picked)
	for range 3000 {
		picked[s.Pick(nil).Addr]++
	}
	for _, sv := range servers {
		if n := picked[sv.Addr]; n < 800 || n > 1200 {
			t.Errorf("%s picked %d times of 3000 with nothing in flight: %v", sv.Addr, n, picked)
		}
	}
}

// A server that refused a connection is set aside for EjectFor, then
// picked again; servers already tried for a request are not picked for
// it; when every server is set aside one is tried anyway; when every
// one has been tried there is none.
func TestPickSetsAsideAndRetries(t *testing.T) {
	ev := &events{}
	s := static(t, Options{MaxLabels: 8, EjectFor: 200 * time.Millisecond, Events: ev}, "http://a:1", "http://b:1")
	a, b := s.Servers()[0], s.Servers()[1]
	s.Refused(a)
	if !slices.Equal(ev.ejected, []string{a.Addr}) {
		t.Errorf("ejections told %v, want [%s]", ev.ejected, a.Addr)
	}
	for range 200 {
		if got := s.Pick(nil); got != b {
			t.Fatalf("picked %s while %s is set aside", got.Addr, a.Addr)
		}
	}
	if got := s.Pick([]*Server{b}); got != a {
		t.Errorf("with %s tried, picked %v: want the server set aside rather than none", b.Addr, got)
	}
	if got := s.Pick([]*Server{a, b}); got != nil {
		t.Errorf("with every server tried, picked %s", got.Addr)
	}
	time.Sleep(250 * time.Millisecond)
	seen := map[*Server]bool{}
	for range 200 {
		seen[s.Pick(nil)] = true
	}
	if !seen[a] {
		t.Errorf("%s not picked again once its time aside was over", a.Addr)
	}
}

// A name: every address it resolves to, with the URL's port; followed as
// its addresses change (a server that stays keeps its count of
// requests in flight); emptied when it resolves to nothing, and filled
// again when it resolves again; kept as it was when a resolution fails.
func TestResolvedFollowsTheName(t *testing.T) {
	d := testdns.Start(t, "llm.test.", "127.0.0.2", "127.0.0.3")
	var broken atomic.Bool // the resolver's server does not answer
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		if broken.Load() {
			return nil, errors.New("no DNS server")
		}
		var dialer net.Dialer
		return dialer.DialContext(ctx, network, d.Addr)
	}}
	u := mustURLs(t, "http://llm.test.:8000")[0]
	ev := &events{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := NewResolved(ctx, u, resolver, 20*time.Millisecond, Options{MaxLabels: 8, Events: ev})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := addrs(s.Servers()), []string{"127.0.0.2:8000", "127.0.0.3:8000"}; !slices.Equal(got, want) {
		t.Fatalf("servers %v, want %v", got, want)
	}
	for _, sv := range s.Servers() {
		if sv.Host != "" || sv.Label() != sv.Addr {
			t.Errorf("%s: Host %q (want the URL's, \"\"), label %q", sv.Addr, sv.Host, sv.Label())
		}
	}
	kept := s.Servers()[1]
	kept.Acquire()

	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	d.Set("127.0.0.3", "127.0.0.4")
	waitFor(t, func() bool { return slices.Equal(addrs(s.Servers()), []string{"127.0.0.3:8000", "127.0.0.4:8000"}) })
	if s.Servers()[0] != kept || kept.InFlight() != 1 {
		t.Errorf("the server that stayed was replaced or lost its count (%d in flight)", kept.InFlight())
	}
	ev.mu.Lock()
	if !slices.ContainsFunc(ev.removed, func(r []string) bool { return slices.Equal(r, []string{"127.0.0.2:8000"}) }) {
		t.Errorf("the address that left was not told as removed: %v", ev.removed)
	}
	ev.mu.Unlock()

	d.Set()
	waitFor(t, func() bool { return len(s.Servers()) == 0 })
	if s.Pick(nil) != nil {
		t.Error("picked a server of a name that resolves to nothing")
	}
	d.Set("127.0.0.3")
	waitFor(t, func() bool { return slices.Equal(addrs(s.Servers()), []string{"127.0.0.3:8000"}) })
	ev.mu.Lock()
	if len(ev.failed) != 0 {
		t.Errorf("an answer of no address told as a failure: %v", ev.failed)
	}
	ev.mu.Unlock()
	// A resolution that fails (nothing answers) keeps the set.
	broken.Store(true)
	waitFor(t, func() bool { ev.mu.Lock(); defer ev.mu.Unlock(); return len(ev.failed) > 0 })
	if got := addrs(s.Servers()); !slices.Equal(got, []string{"127.0.0.3:8000"}) {
		t.Errorf("a failed resolution changed the set to %v", got)
	}
	cancel()
	<-done
	broken.Store(false)
	d.Set()

	if _, err := NewResolved(context.Background(), u, resolver, time.Second, Options{}); err == nil {
		t.Error("a name that resolves to nothing at the start: no error")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The proxy's own addresses are never servers: a list that names them
// leaves them out (told once), a list of nothing else is refused, an
// answer that holds them leaves them out, told when an answer starts
// holding them; an address of every interface stands for the host's
// addresses at its port, loopback ones included.
func TestOwnAddressesLeftOut(t *testing.T) {
	specific := []net.Addr{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 8080}, &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 9090}}
	ev := &events{}
	s := static(t, Options{MaxLabels: 8, Events: ev, Own: specific}, "http://10.1.2.3:8080", "http://10.1.2.3:8000", "http://10.1.2.4:8080", "http://10.1.2.3:9090")
	if got, want := addrs(s.Servers()), []string{"10.1.2.3:8000", "10.1.2.4:8080"}; !slices.Equal(got, want) {
		t.Errorf("servers %v, want %v", got, want)
	}
	if len(ev.leftOut) != 1 || !slices.Equal(ev.leftOut[0], []string{"10.1.2.3:8080", "10.1.2.3:9090"}) {
		t.Errorf("left out told %v, want the two own addresses once", ev.leftOut)
	}
	if _, err := NewStatic(mustURLs(t, "http://10.1.2.3:8080"), Options{Own: specific}); !errors.Is(err, ErrOnlyOwn) {
		t.Errorf("a list of the proxy's own address alone: %v, want ErrOnlyOwn", err)
	}

	every := []net.Addr{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}}
	o := newOwn(every)
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.0.0.9:8080": true, "[::1]:8080": true, "0.0.0.0:8080": true,
		"127.0.0.1:8000": false, "192.0.2.1:8080": false, "llm.test:8080": false,
	} {
		if got := o.holds(addr); got != want {
			t.Errorf("listening on [::]:8080, %s is own: %v, want %v", addr, got, want)
		}
	}
	ifaces, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range ifaces {
		ip := a.(*net.IPNet).IP
		if addr := net.JoinHostPort(ip.String(), "8080"); ip.To4() != nil && !o.holds(addr) {
			t.Errorf("listening on [::]:8080, the interface address %s is not own", addr)
		}
	}

	d := testdns.Start(t, "llm.test.", "127.0.0.2")
	resolver := resolverOf(d)
	ev = &events{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	u := mustURLs(t, "http://llm.test.:8080")[0]
	loopback := []net.Addr{&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 8080}}
	r, err := NewResolved(ctx, u, resolver, 10*time.Millisecond, Options{MaxLabels: 8, Events: ev, Own: loopback})
	if err != nil {
		t.Fatal(err)
	}
	go r.Run(ctx)
	d.Set("127.0.0.1", "127.0.0.2")    // the proxy's own address comes in the answer
	time.Sleep(100 * time.Millisecond) // several resolutions
	if got := addrs(r.Servers()); !slices.Equal(got, []string{"127.0.0.2:8080"}) {
		t.Errorf("servers %v, want the proxy's own left out", got)
	}
	ev.mu.Lock()
	if len(ev.leftOut) != 1 || !slices.Equal(ev.leftOut[0], []string{"127.0.0.1:8080"}) {
		t.Errorf("left out told %v, want once, whatever the answers that followed", ev.leftOut)
	}
	ev.mu.Unlock()
	d.Set("127.0.0.1") // nothing but the proxy: no server
	waitFor(t, func() bool { return len(r.Servers()) == 0 })
	if _, err := NewResolved(ctx, u, resolver, time.Second, Options{Own: loopback}); !errors.Is(err, ErrOnlyOwn) {
		t.Errorf("a name of the proxy's own address alone at the start: %v, want ErrOnlyOwn", err)
	}
}

// Picking reads the servers a fixed number of times whatever was tried,
// and allocates nothing: a pool of thousands costs a request microseconds.
func TestPickIsLinear(t *testing.T) {
	var raw []string
	for i := range 2500 {
		raw = append(raw, fmt.Sprintf("http://10.0.%d.%d:8000", i/250, i%250))
	}
	s := static(t, Options{MaxLabels: 8, EjectFor: time.Hour}, raw...)
	for _, sv := range s.Servers()[:2400] {
		s.Refused(sv)
	}
	tried := make([]*Server, 0, 3)
	if allocs := testing.AllocsPerRun(100, func() {
		tried = tried[:0]
		for range 3 {
			sv := s.Pick(tried)
			if sv == nil || slices.Contains(tried, sv) || sv.ejected(time.Now()) {
				t.Fatalf("picked %v, tried %d", sv, len(tried))
			}
			tried = append(tried, sv)
		}
	}); allocs != 0 {
		t.Errorf("%v allocations to pick three of 2,500", allocs)
	}
}

// resolverOf asks d.
func resolverOf(d *testdns.DNS) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var dialer net.Dialer
		return dialer.DialContext(ctx, network, d.Addr)
	}}
}

// A server past the cap takes a label of its own once one frees: the
// server that held it left the name.
func TestOtherTakesAFreedLabel(t *testing.T) {
	d := testdns.Start(t, "llm.test.", "127.0.0.2", "127.0.0.3")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := NewResolved(ctx, mustURLs(t, "http://llm.test.:8000")[0], resolverOf(d), 20*time.Millisecond, Options{MaxLabels: 1})
	if err != nil {
		t.Fatal(err)
	}
	labels := func() map[string]string {
		out := map[string]string{}
		for _, sv := range s.Servers() {
			out[sv.Addr] = sv.Label()
		}
		return out
	}
	if got := labels(); got["127.0.0.2:8000"] != "127.0.0.2:8000" || got["127.0.0.3:8000"] != LabelOther {
		t.Fatalf("labels %v: want the first its own, the second %q", got, LabelOther)
	}
	other := s.Servers()[1]
	go s.Run(ctx)
	d.Set("127.0.0.3")
	waitFor(t, func() bool { return len(s.Servers()) == 1 })
	if s.Servers()[0] != other || other.Label() != "127.0.0.3:8000" {
		t.Errorf("after the labelled server left, the other is %s labelled %q; want the same server, labelled with its address",
			s.Servers()[0].Addr, other.Label())
	}
}

// A dual-stack name (an A and an AAAA record per pod) is one server per
// pod by default, as each family says otherwise.
func TestResolvedFamily(t *testing.T) {
	d := testdns.Start(t, "llm.test.", "127.0.0.2", "fd00::2", "127.0.0.3", "fd00::3")
	v4, v6 := []string{"127.0.0.2:8000", "127.0.0.3:8000"}, []string{"[fd00::2]:8000", "[fd00::3]:8000"}
	for _, tc := range []struct {
		family Family
		want   []string
	}{
		{"", v4},
		{FamilyV4Preferred, v4},
		{FamilyV4Only, v4},
		{FamilyAuto, v6},
		{FamilyV6Only, v6},
		{FamilyAll, append(slices.Clone(v4), v6...)},
	} {
		s, err := NewResolved(context.Background(), mustURLs(t, "http://llm.test.:8000")[0], resolverOf(d), time.Second, Options{MaxLabels: 8, Family: tc.family})
		if err != nil {
			t.Fatalf("%q: %v", tc.family, err)
		}
		want := slices.Clone(tc.want)
		slices.Sort(want)
		if got := addrs(s.Servers()); !slices.Equal(got, want) {
			t.Errorf("family %q: servers %v, want %v", tc.family, got, want)
		}
	}
	// Preferred families fall back to the other; an only family does not.
	d.Set("fd00::2")
	if s, err := NewResolved(context.Background(), mustURLs(t, "http://llm.test.:8000")[0], resolverOf(d), time.Second, Options{}); err != nil ||
		!slices.Equal(addrs(s.Servers()), []string{"[fd00::2]:8000"}) {
		t.Errorf("v4_preferred on an IPv6-only name: %v", err)
	}
	if _, err := NewResolved(context.Background(), mustURLs(t, "http://llm.test.:8000")[0], resolverOf(d), time.Second, Options{Family: FamilyV4Only}); err == nil {
		t.Error("v4_only on an IPv6-only name: no error")
	}
}
