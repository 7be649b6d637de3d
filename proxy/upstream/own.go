package upstream

import (
	"net"
	"net/netip"
)

// own is the addresses the proxy itself listens on. A server at one of
// them would be the proxy sending its requests to itself, each coming
// back as a new request to send on, so a set leaves such servers out:
// a list of URLs that names the proxy, a name whose answer holds the
// proxy's own address (a headless Service that selects the proxy's pods).
type own struct {
	// exact are the addresses listened on; anyPort the ports listened on
	// at every address of the host, which local holds (its interfaces' and
	// the loopback ones).
	exact   map[netip.AddrPort]bool
	anyPort map[uint16]bool
	local   map[netip.Addr]bool
}

// newOwn returns the proxy's own addresses, from those of its listeners.
func newOwn(listeners []net.Addr) own {
	o := own{exact: map[netip.AddrPort]bool{}, anyPort: map[uint16]bool{}, local: map[netip.Addr]bool{}}
	for _, l := range listeners {
		ap, err := netip.ParseAddrPort(l.String())
		if err != nil {
			continue
		}
		if ip := ap.Addr().Unmap(); !ip.IsUnspecified() {
			o.exact[netip.AddrPortFrom(ip, ap.Port())] = true
			continue
		}
		o.anyPort[ap.Port()] = true
	}
	if len(o.anyPort) > 0 {
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				o.local[p.Addr().Unmap()] = true
			}
		}
	}
	return o
}

// holds reports whether addr (host:port) is one of the proxy's own. A
// host that is a name is not: it is not looked up (a request that comes
// back through one is answered 508, as the proxy's Via says it is its
// own).
func (o own) holds(addr string) bool {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap().WithZone("")
	if o.exact[netip.AddrPortFrom(ip, ap.Port())] {
		return true
	}
	return o.anyPort[ap.Port()] && (ip.IsLoopback() || ip.IsUnspecified() || o.local[ip])
}
