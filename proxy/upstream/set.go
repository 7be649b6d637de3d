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

// LabelOther is the label of the endpoints past the cap.
const LabelOther = "_other"

// Endpoint is one upstream server the proxy balances over.
type Endpoint struct {
	// Addr is the host:port requests to it are sent to, and Host the
	// Host header they carry ("": the upstream URL's, for endpoints
	// resolved from its name).
	Addr, Host string
	// Label is its value of the upstream label: Addr, or LabelOther past
	// the cap.
	Label string

	inFlight     atomic.Int64 // requests sent to it and not yet ended
	ejectedUntil atomic.Int64 // monotonic nanoseconds (sinceStart); 0: not set aside
}

// processStart is the origin of the monotonic clock of the endpoints' time
// aside, which a change of the wall clock does not move.
var processStart = time.Now()

func sinceStart(t time.Time) int64 { return int64(t.Sub(processStart)) }

// Acquire counts a request sent to e, until Release.
func (e *Endpoint) Acquire() { e.inFlight.Add(1) }

// Release ends a request Acquire counted.
func (e *Endpoint) Release() { e.inFlight.Add(-1) }

// InFlight is the requests sent to e and not yet ended.
func (e *Endpoint) InFlight() int64 { return e.inFlight.Load() }

// eject sets e aside until until.
func (e *Endpoint) eject(until time.Time) { e.ejectedUntil.Store(sinceStart(until)) }

// ejected reports whether e is set aside at now.
func (e *Endpoint) ejected(now time.Time) bool { return sinceStart(now) < e.ejectedUntil.Load() }

// Events hears what happens to a Set's endpoints, for the metrics and the
// log. Its methods may be called from the Set's resolving goroutine and
// from the requests' goroutines.
type Events interface {
	// Resolved: the set is now endpoints (at the start, and after every
	// resolution that succeeded); removed left it.
	Resolved(endpoints, removed []*Endpoint)
	// ResolveFailed: a resolution failed; the set stays as it was.
	ResolveFailed(err error)
	// Ejected: e refused a connection and is set aside for d.
	Ejected(e *Endpoint, d time.Duration)
	// LeftOut: the proxy's own addresses (Options.Own), which a list or an
	// answer held, are left out of the set; told when an answer starts
	// holding them, not again while the next ones do.
	LeftOut(addrs []string)
}

// Set is the endpoints an upstream URL stands for: its own host, a fixed
// list of hosts, or every address its name resolves to, re-resolved.
// Pick chooses among them; it is safe for concurrent use.
type Set struct {
	endpoints atomic.Pointer[[]*Endpoint]
	events    Events
	maxLabels int
	// ejectFor is how long an endpoint that refused a connection is set
	// aside.
	ejectFor time.Duration

	// For a resolved name: the name, the port, how to resolve it and how
	// often.
	name, port string
	resolver   *net.Resolver
	interval   time.Duration

	// own are the proxy's own addresses, never endpoints.
	own own

	mu     sync.Mutex // held to change the set
	labels map[string]bool
	// leftOut: the last list or answer held own addresses.
	leftOut bool
}

// Options configure a Set.
type Options struct {
	// MaxLabels caps the distinct upstream label values of the endpoints
	// at once; past it, endpoints are labelled LabelOther.
	MaxLabels int
	// EjectFor is how long an endpoint that refused a connection is set
	// aside before it is tried again.
	EjectFor time.Duration
	// Events hears what happens to the set; nil: nothing does.
	Events Events
	// Own are the addresses the proxy listens on (its listeners'), which
	// are never endpoints; an unspecified one (0.0.0.0, ::) stands for
	// every address of the host at its port.
	Own []net.Addr
}

// ErrOnlyOwn is a list of URLs, or a name's answer, that holds nothing
// but the proxy's own addresses.
var ErrOnlyOwn = errors.New("it holds only the proxy's own addresses (ITLPROXY_LISTEN_ADDR, ITLPROXY_ADMIN_ADDR): the proxy would send its requests to itself")

// NewStatic returns the set of fixed endpoints: the hosts (host:port) of
// urls, each request to one carrying its host as its Host header. It
// fails when they are all the proxy's own addresses.
func NewStatic(urls []*url.URL, o Options) (*Set, error) {
	s := newSet(o)
	var eps []*Endpoint
	for _, u := range urls {
		eps = append(eps, &Endpoint{Addr: hostPort(u), Host: u.Host})
	}
	s.update(eps)
	if len(s.Endpoints()) == 0 {
		return nil, ErrOnlyOwn
	}
	return s, nil
}

// NewResolved returns the set of every address the host of u resolves to
// (A and AAAA records), with u's port, resolved now and again every
// interval by Run; requests keep u's host as their Host header. It fails
// when the name resolves to nothing, or to the proxy's own addresses
// alone.
func NewResolved(ctx context.Context, u *url.URL, resolver *net.Resolver, interval time.Duration, o Options) (*Set, error) {
	s := newSet(o)
	s.name, s.port = u.Hostname(), port(u)
	s.resolver, s.interval = resolver, interval
	eps, err := s.resolve(ctx)
	if err != nil {
		return nil, err
	}
	s.update(eps)
	if len(s.Endpoints()) == 0 {
		return nil, ErrOnlyOwn
	}
	return s, nil
}

func newSet(o Options) *Set {
	if o.Events == nil {
		o.Events = noEvents{}
	}
	return &Set{events: o.Events, maxLabels: max(o.MaxLabels, 1), ejectFor: o.EjectFor, labels: map[string]bool{}, own: newOwn(o.Own)}
}

// ErrNoAddresses is a name that resolves to no address.
var ErrNoAddresses = errors.New("the name resolves to no address")

// resolve looks the name up, once. An answer of no address, or that the
// name does not exist, is ErrNoAddresses.
func (s *Set) resolve(ctx context.Context) ([]*Endpoint, error) {
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
	if len(ips) == 0 {
		return nil, ErrNoAddresses
	}
	var eps []*Endpoint
	for _, ip := range ips {
		eps = append(eps, &Endpoint{Addr: net.JoinHostPort(ip.IP.String(), s.port)})
	}
	return eps, nil
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
		eps, err := s.resolve(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrNoAddresses):
			s.update(nil)
		case err != nil:
			s.events.ResolveFailed(fmt.Errorf("resolving %s: %w", s.name, err))
		default:
			s.update(eps)
		}
	}
}

// update makes eps the set, but for the proxy's own addresses, keeping the
// endpoints already in it (their counts and labels), labelling the new
// ones, and tells Events.
func (s *Set) update(eps []*Endpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	eps = s.leaveOutOwn(eps)
	old := map[string]*Endpoint{}
	if cur := s.endpoints.Load(); cur != nil {
		for _, e := range *cur {
			old[e.Addr] = e
		}
	}
	next := make([]*Endpoint, 0, len(eps))
	for _, e := range eps {
		if o := old[e.Addr]; o != nil {
			delete(old, e.Addr)
			next = append(next, o)
			continue
		}
		if slices.ContainsFunc(next, func(n *Endpoint) bool { return n.Addr == e.Addr }) {
			continue // an address listed twice
		}
		next = append(next, e)
	}
	var removed []*Endpoint
	for _, e := range old {
		removed = append(removed, e)
		if e.Label != LabelOther {
			delete(s.labels, e.Label)
		}
	}
	for _, e := range next {
		if e.Label != "" {
			continue
		}
		e.Label = LabelOther
		if len(s.labels) < s.maxLabels {
			e.Label = e.Addr
			s.labels[e.Addr] = true
		}
	}
	slices.SortFunc(next, func(a, b *Endpoint) int { return strings.Compare(a.Addr, b.Addr) })
	s.endpoints.Store(&next)
	s.events.Resolved(next, removed)
}

// leaveOutOwn returns eps without the proxy's own addresses, and tells
// Events of those when the last list or answer held none. Called with mu
// held.
func (s *Set) leaveOutOwn(eps []*Endpoint) []*Endpoint {
	var mine []string
	kept := eps[:0:0]
	for _, e := range eps {
		if s.own.holds(e.Addr) {
			mine = append(mine, e.Addr)
			continue
		}
		kept = append(kept, e)
	}
	if len(mine) > 0 && !s.leftOut {
		s.events.LeftOut(mine)
	}
	s.leftOut = len(mine) > 0
	return kept
}

// Endpoints returns the set now.
func (s *Set) Endpoints() []*Endpoint {
	if p := s.endpoints.Load(); p != nil {
		return *p
	}
	return nil
}

// Pick chooses the endpoint of a new request: of two taken at random
// among those not set aside and not in tried, the one with fewer requests
// in flight (the least of two random choices, as Envoy's least-request
// balancer); when every one not tried is set aside, among those. It
// returns nil when there is none left. It reads the set twice, to count
// and to find the two, whatever tried holds (a few at most): linear in
// the endpoints, and allocating nothing.
func (s *Set) Pick(tried []*Endpoint) *Endpoint {
	eps := s.Endpoints()
	now := time.Now()
	aside := false // set-aside endpoints are candidates too
	candidate := func(e *Endpoint) bool {
		return (aside || !e.ejected(now)) && !slices.Contains(tried, e)
	}
	n := 0
	for _, e := range eps {
		if candidate(e) {
			n++
		}
	}
	if n == 0 {
		aside = true
		for _, e := range eps {
			if candidate(e) {
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
	var ea, eb, untried *Endpoint
	i := 0
	for _, e := range eps {
		if untried == nil && !slices.Contains(tried, e) {
			untried = e
		}
		if !candidate(e) {
			continue
		}
		switch i {
		case a:
			ea = e
		case b:
			eb = e
		}
		i++
	}
	switch {
	case ea == nil && eb == nil: // endpoints set aside between the two reads
		return untried
	case ea == nil:
		return eb
	case eb != nil && eb.InFlight() < ea.InFlight():
		return eb
	}
	return ea
}

// Refused sets e aside: it refused a connection.
func (s *Set) Refused(e *Endpoint) {
	e.eject(time.Now().Add(s.ejectFor))
	s.events.Ejected(e, s.ejectFor)
}

type noEvents struct{}

func (noEvents) Resolved(_, _ []*Endpoint)        {}
func (noEvents) ResolveFailed(error)              {}
func (noEvents) Ejected(*Endpoint, time.Duration) {}
func (noEvents) LeftOut([]string)                 {}

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
