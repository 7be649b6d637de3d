package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/envconfig"
	"github.com/itlproxy/itlproxy/proxy/upstream"
)

// upstreamEjectFor is how long a server that refused a connection is
// set aside before it is tried again.
const upstreamEjectFor = 10 * time.Second

// upstreamURLs are the URLs ITLPROXY_UPSTREAM_URL lists (one, usually),
// nil when one does not parse (validate says which).
func (c config) upstreamURLs() []*url.URL {
	var out []*url.URL
	for raw := range strings.SplitSeq(c.UpstreamURL, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil {
			return nil
		}
		out = append(out, u)
	}
	return out
}

// validateUpstream checks the upstream URL, or list of URLs, and how its
// servers are found.
func (c config) validateUpstream(demo bool, add func(key, value, why string)) {
	switch {
	case c.UpstreamURL == "" && !demo:
		add("ITLPROXY_UPSTREAM_URL", "", "required: the URL of the OpenAI-compatible server, e.g. http://127.0.0.1:8000")
		return
	case c.UpstreamURL == "":
		return
	}
	raws := strings.Split(c.UpstreamURL, ",")
	var first *url.URL
	for _, raw := range raws {
		raw = strings.TrimSpace(raw)
		if why := checkUpstream(raw); why != "" {
			add("ITLPROXY_UPSTREAM_URL", c.UpstreamURL, why)
			return
		}
		u, _ := url.Parse(raw)
		switch {
		case first == nil:
			first = u
		case u.Scheme != first.Scheme || u.Path != first.Path || u.RawQuery != first.RawQuery:
			add("ITLPROXY_UPSTREAM_URL", c.UpstreamURL, "a mixed list: every URL must have the same scheme, base path and query")
			return
		}
	}
	switch c.UpstreamResolve {
	case "", "none":
	case "dns":
		if len(raws) > 1 {
			add("ITLPROXY_UPSTREAM_RESOLVE", c.UpstreamResolve, "re-resolves one name: ITLPROXY_UPSTREAM_URL lists several URLs")
		}
		if net.ParseIP(first.Hostname()) != nil {
			add("ITLPROXY_UPSTREAM_RESOLVE", c.UpstreamResolve, "ITLPROXY_UPSTREAM_URL's host is an address, not a name to resolve")
		}
	default:
		add("ITLPROXY_UPSTREAM_RESOLVE", c.UpstreamResolve, "must be dns, or unset")
	}
	if !slices.Contains(upstream.Families, upstream.Family(c.UpstreamDNSLookupFamily)) {
		add("ITLPROXY_UPSTREAM_DNS_LOOKUP_FAMILY", c.UpstreamDNSLookupFamily, "must be v4_preferred, auto, v4_only, v6_only or all")
	}
	if c.UpstreamResolveInterval <= 0 {
		add("ITLPROXY_UPSTREAM_RESOLVE_INTERVAL", c.UpstreamResolveInterval.String(), "must be positive")
	}
	if c.UpstreamResolver != "" && !checkAddr(c.UpstreamResolver) {
		add("ITLPROXY_UPSTREAM_RESOLVER", c.UpstreamResolver, "not a host:port address (e.g. 10.96.0.10:53)")
	}
	if c.UpstreamMaxEndpoints < 1 {
		add("ITLPROXY_UPSTREAM_MAX_ENDPOINTS", strconv.Itoa(c.UpstreamMaxEndpoints), "must be at least 1")
	}
}

// balanced reports whether the proxy balances over several servers: a
// list of URLs, or a name re-resolved.
func (c config) balanced() bool {
	return c.UpstreamResolve == "dns" || strings.Contains(c.UpstreamURL, ",")
}

// servers returns the upstream's set of servers, or nil for one URL as it
// is; the set of a name is resolved once now. own are the proxy's
// listeners, whose addresses are never servers. A name that resolves to
// nothing, or a list or a name of the proxy's own addresses alone, is a
// configuration error.
func (c config) servers(ctx context.Context, events upstream.Events, own []net.Addr) (*upstream.Set, error) {
	if !c.balanced() {
		return nil, nil
	}
	o := upstream.Options{MaxLabels: c.UpstreamMaxEndpoints, EjectFor: upstreamEjectFor, Events: events,
		Family: upstream.Family(c.UpstreamDNSLookupFamily), Own: own}
	urls := c.upstreamURLs()
	if c.UpstreamResolve != "dns" {
		set, err := upstream.NewStatic(urls, o)
		if err != nil {
			return nil, &configError{problems: []string{fmt.Sprintf("ITLPROXY_UPSTREAM_URL=%q: %v", envconfig.ShowURL(c.UpstreamURL), err)}}
		}
		return set, nil
	}
	set, err := upstream.NewResolved(ctx, urls[0], c.resolver(), c.UpstreamResolveInterval, o)
	if err != nil {
		return nil, &configError{problems: []string{fmt.Sprintf("ITLPROXY_UPSTREAM_URL=%q with ITLPROXY_UPSTREAM_RESOLVE=dns: %v",
			envconfig.ShowURL(c.UpstreamURL), err)}}
	}
	return set, nil
}

// resolver is the DNS resolver of the upstream's name: the system's, or
// Go's own asking ITLPROXY_UPSTREAM_RESOLVER.
func (c config) resolver() *net.Resolver {
	if c.UpstreamResolver == "" {
		return net.DefaultResolver
	}
	server := c.UpstreamResolver
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, server)
	}}
}
