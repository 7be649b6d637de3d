package upstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// LabelOther is the label of the servers past the cap.
const LabelOther = "_other"

// Server is one upstream server the proxy balances over: a member of the
// upstream, as nginx calls the servers of an upstream block.
type Server struct {
	// Addr is the host:port requests to it are sent to, and Host the
	// Host header they carry ("": the upstream URL's, for servers
	// resolved from its name).
	Addr, Host string

	label        atomic.Pointer[string] // Label's
	inFlight     atomic.Int64           // requests sent to it and not yet ended
	ejectedUntil atomic.Int64           // monotonic nanoseconds (sinceStart); 0: not set aside
}

// processStart is the origin of the monotonic clock of the servers' time
// aside, which a change of the wall clock does not move.
var processStart = time.Now()

func sinceStart(t time.Time) int64 { return int64(t.Sub(processStart)) }

// Label is its value of the upstream label: Addr, or LabelOther while it
// is past the cap (a server that came when every label was taken takes
// its own once one frees).
func (sv *Server) Label() string {
	if p := sv.label.Load(); p != nil {
		return *p
	}
	return ""
}

// Acquire counts a request sent to sv, until Release.
func (sv *Server) Acquire() { sv.inFlight.Add(1) }

// Release ends a request Acquire counted.
func (sv *Server) Release() { sv.inFlight.Add(-1) }

// InFlight is the requests sent to sv and not yet ended.
func (sv *Server) InFlight() int64 { return sv.inFlight.Load() }

// eject sets sv aside until until.
func (sv *Server) eject(until time.Time) { sv.ejectedUntil.Store(sinceStart(until)) }

// ejected reports whether sv is set aside at now.
func (sv *Server) ejected(now time.Time) bool { return sinceStart(now) < sv.ejectedUntil.Load() }

// Events hears what happens to a Set's servers, for the metrics and the
// log. Its methods may be called from the Set's resolving goroutine and
// from the requests' goroutines.
type Events interface {
	// Resolved: the set is now servers (at the start, and after every
	// resolution that succeeded); removed left it.
	Resolved(servers, removed []*Server)
	// ResolveFailed: a resolution failed; the set stays as it was.
	ResolveFailed(err error)
	// Ejected: sv refused a connection and is set aside for d.
	Ejected(sv *Server, d time.Duration)
	// LeftOut: the proxy's own addresses (Options.Own), which a list or an
	// answer held, are left out of the set; told when an answer starts
	// holding them, not again while the next ones do.
	LeftOut(addrs []string)
}

// Set is the servers an upstream URL stands for: its own host, a fixed
// list of hosts, or every address its name resolves to, re-resolved.
// Pick chooses among them; it is safe for concurrent use.
type Set struct {
	servers   atomic.Pointer[[]*Server]
	events    Events
	maxLabels int
	// ejectFor is how long a server that refused a connection is set
	// aside.
	ejectFor time.Duration

	// For a resolved name: the name, the port, how to resolve it and how
	// often.
	name, port string
	resolver   *net.Resolver
	interval   time.Duration

	// own are the proxy's own addresses, never servers.
	own own

	mu     sync.Mutex // held to change the set
	labels map[string]bool
	// leftOut: the last list or answer held own addresses.
	leftOut bool
	family  Family
}

// Options configure a Set.
type Options struct {
	// MaxLabels caps the distinct upstream label values of the servers
	// at once; past it, servers are labelled LabelOther.
	MaxLabels int
	// EjectFor is how long a server that refused a connection is set
	// aside before it is tried again.
	EjectFor time.Duration
	// Family is the address families of a resolved name balanced over;
	// "" is FamilyV4Preferred.
	Family Family
	// Events hears what happens to the set; nil: nothing does.
	Events Events
	// Own are the addresses the proxy listens on (its listeners'), which
	// are never servers; an unspecified one (0.0.0.0, ::) stands for
	// every address of the host at its port.
	Own []net.Addr
}

// ErrOnlyOwn is a list of URLs, or a name's answer, that holds nothing
// but the proxy's own addresses.
var ErrOnlyOwn = errors.New("it holds only the proxy's own addresses (ITLPROXY_LISTEN_ADDR, ITLPROXY_ADMIN_ADDR): the proxy would send its requests to itself")

// NewStatic returns the set of fixed servers: the hosts (host:port) of
// urls, each request to one carrying its host as its Host header. It
// fails when they are all the proxy's own addresses.
func NewStatic(urls []*url.URL, o Options) (*Set, error) {
	s := newSet(o)
	var servers []*Server
	for _, u := range urls {
		servers = append(servers, &Server{Addr: hostPort(u), Host: u.Host})
	}
	s.update(servers)
	if len(s.Servers()) == 0 {
		return nil, ErrOnlyOwn
	}
	return s, nil
}

// NewResolved returns the set of every address the host of u resolves to
// (its A or AAAA records, as o.Family says), with u's port, resolved now and again every
// interval by Run; requests keep u's host as their Host header. It fails
// when the name resolves to nothing, or to the proxy's own addresses
// alone.
func NewResolved(ctx context.Context, u *url.URL, resolver *net.Resolver, interval time.Duration, o Options) (*Set, error) {
	s := newSet(o)
	s.name, s.port = u.Hostname(), port(u)
	s.resolver, s.interval = resolver, interval
	servers, err := s.resolve(ctx)
	if err != nil {
		return nil, err
	}
	s.update(servers)
	if len(s.Servers()) == 0 {
		return nil, ErrOnlyOwn
	}
	return s, nil
}

func newSet(o Options) *Set {
	if o.Events == nil {
		o.Events = noEvents{}
	}
	return &Set{events: o.Events, maxLabels: max(o.MaxLabels, 1), ejectFor: o.EjectFor, labels: map[string]bool{},
		family: o.Family, own: newOwn(o.Own)}
}

// ErrNoAddresses is a name that resolves to no address.
var ErrNoAddresses = errors.New("the name resolves to no address")

// resolve looks the name up, once. An answer of no address (of the
// families the set takes), or that the name does not exist, is
// ErrNoAddresses.
func (s *Set) resolve(ctx context.Context) ([]*Server, error) {
	ctx, cancel := context.WithTimeout(ctx, min(s.interval, 5*time.Second)+time.Second)
	defer cancel()
	ips, err := s.resolver.LookupIPAddr(ctx, s.name)
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return nil, fmt.Errorf("%w (%v)", ErrNoAddresses, err)
	}
	if err != nil {
		return nil, err
	}
	ips = s.family.of(ips)
	if len(ips) == 0 {
		return nil, ErrNoAddresses
	}
	var servers []*Server
	for _, ip := range ips {
		servers = append(servers, &Server{Addr: net.JoinHostPort(ip.IP.String(), s.port)})
	}
	return servers, nil
}

// Run re-resolves the name every interval until ctx is canceled. A
// resolution that fails (a timeout, a server failure) keeps the set as it
// was: it says nothing of the servers. An answer that the name has no
// address (none ready behind a headless Service, or the name gone) empties
// the set: the servers it named may be gone, their addresses given to
// others, and a request is better answered at once than sent there. A
// fixed set has nothing to run.
func (s *Set) Run(ctx context.Context) {
	if s.name == "" {
		return
	}
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		servers, err := s.resolve(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrNoAddresses):
			s.update(nil)
		case err != nil:
			s.events.ResolveFailed(fmt.Errorf("resolving %s: %w", s.name, err))
		default:
			s.update(servers)
		}
	}
}

// update makes servers the set, but for the proxy's own addresses,
// keeping the servers already in it (their counts and labels), labelling
// the new ones, and tells Events.
func (s *Set) update(servers []*Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	servers = s.leaveOutOwn(servers)
	old := map[string]*Server{}
	if cur := s.servers.Load(); cur != nil {
		for _, sv := range *cur {
			old[sv.Addr] = sv
		}
	}
	next := make([]*Server, 0, len(servers))
	for _, sv := range servers {
		if o := old[sv.Addr]; o != nil {
			delete(old, sv.Addr)
			next = append(next, o)
			continue
		}
		if slices.ContainsFunc(next, func(n *Server) bool { return n.Addr == sv.Addr }) {
			continue // an address listed twice
		}
		next = append(next, sv)
	}
	var removed []*Server
	for _, sv := range old {
		removed = append(removed, sv)
		if l := sv.Label(); l != LabelOther {
			delete(s.labels, l)
		}
	}
	// A label of its own to each new server, and to one past the cap
	// before, while the cap allows: the labels of the servers that left
	// are free again.
	for _, sv := range next {
		if l := sv.Label(); l != "" && l != LabelOther {
			continue
		}
		label := LabelOther
		if len(s.labels) < s.maxLabels {
			label = sv.Addr
			s.labels[sv.Addr] = true
		}
		if label != sv.Label() {
			sv.label.Store(&label)
		}
	}
	slices.SortFunc(next, func(a, b *Server) int { return strings.Compare(a.Addr, b.Addr) })
	s.servers.Store(&next)
	s.events.Resolved(next, removed)
}

// leaveOutOwn returns servers without the proxy's own addresses, and tells
// Events of those when the last list or answer held none. Called with mu
// held.
func (s *Set) leaveOutOwn(servers []*Server) []*Server {
	var mine []string
	kept := servers[:0:0]
	for _, sv := range servers {
		if s.own.holds(sv.Addr) {
			mine = append(mine, sv.Addr)
			continue
		}
		kept = append(kept, sv)
	}
	if len(mine) > 0 && !s.leftOut {
		s.events.LeftOut(mine)
	}
	s.leftOut = len(mine) > 0
	return kept
}

// Servers returns the set now.
func (s *Set) Servers() []*Server {
	if p := s.servers.Load(); p != nil {
		return *p
	}
	return nil
}

// Pick chooses the server of a new request: of two taken at random
// among those not set aside and not in tried, the one with fewer requests
// in flight (the least of two random choices, as Envoy's least-request
// balancer); when every one not tried is set aside, among those. It
// returns nil when there is none left. It reads the set twice, to count
// and to find the two, whatever tried holds (a few at most): linear in
// the servers, and allocating nothing.
func (s *Set) Pick(tried []*Server) *Server {
	servers := s.Servers()
	now := time.Now()
	aside := false // set-aside servers are candidates too
	candidate := func(sv *Server) bool {
		return (aside || !sv.ejected(now)) && !slices.Contains(tried, sv)
	}
	n := 0
	for _, sv := range servers {
		if candidate(sv) {
			n++
		}
	}
	if n == 0 {
		aside = true
		for _, sv := range servers {
			if candidate(sv) {
				n++
			}
		}
	}
	if n == 0 {
		return nil
	}
	a, b := rand.IntN(n), -1
	if n > 1 {
		b = rand.IntN(n - 1)
		if b >= a {
			b++
		}
	}
	var ea, eb, untried *Server
	i := 0
	for _, sv := range servers {
		if untried == nil && !slices.Contains(tried, sv) {
			untried = sv
		}
		if !candidate(sv) {
			continue
		}
		switch i {
		case a:
			ea = sv
		case b:
			eb = sv
		}
		i++
	}
	switch {
	case ea == nil && eb == nil: // servers set aside between the two reads
		return untried
	case ea == nil:
		return eb
	case eb != nil && eb.InFlight() < ea.InFlight():
		return eb
	}
	return ea
}

// Refused sets sv aside: it refused a connection.
func (s *Set) Refused(sv *Server) {
	sv.eject(time.Now().Add(s.ejectFor))
	s.events.Ejected(sv, s.ejectFor)
}

type noEvents struct{}

func (noEvents) Resolved(_, _ []*Server)        {}
func (noEvents) ResolveFailed(error)            {}
func (noEvents) Ejected(*Server, time.Duration) {}
func (noEvents) LeftOut([]string)               {}

// hostPort is u's host with its port, the scheme's when it names none.
func hostPort(u *url.URL) string { return net.JoinHostPort(u.Hostname(), port(u)) }

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}
