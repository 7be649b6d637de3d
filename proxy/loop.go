package proxy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// A proxy whose upstream leads back to itself (a typo in the URL, a
// Service that selects the proxy's own pods, a DNS answer that holds its
// address) would send each request to itself again and again, a
// goroutine and a connection per hop, until the growing X-Forwarded-For
// overflows a header limit. So the proxy marks each request it forwards
// with a Via of its own pseudonym, as RFC 9110 section 7.6.3 asks of a
// gateway, and answers a request that already carries its mark with 508
// Loop Detected at once, forwarding nothing.

// newPseudonym returns a Via received-by unique to one proxy: its
// requests can be told from another itlproxy's in the same chain.
func newPseudonym() string {
	return fmt.Sprintf("itlproxy-%016x", rand.Uint64())
}

// markVia adds the proxy's entry to the Via of out, a request received as
// in: the protocol it was received over and the proxy's pseudonym.
func (p *Proxy) markVia(in, out *http.Request) {
	version := strconv.Itoa(in.ProtoMajor)
	if in.ProtoMajor < 2 {
		version += "." + strconv.Itoa(in.ProtoMinor)
	}
	out.Header.Add("Via", version+" "+p.pseudonym)
}

// looped reports whether r carries the proxy's own mark: it has been
// through this proxy already.
func (p *Proxy) looped(r *http.Request) bool {
	for _, v := range r.Header["Via"] {
		if strings.Contains(v, p.pseudonym) {
			return true
		}
	}
	return false
}

var errLoop = errors.New("the request came back to this proxy (its Via carries the proxy's own): its upstream leads to itself")

// loopLogEvery bounds the warnings of a loop: each request that comes back
// is answered and counted (itlproxy_requests_total, code 508), and logged
// at most once a minute.
const loopLogEvery = time.Minute

// warnLoop logs that a request came back, at a bounded rate.
func (p *Proxy) warnLoop() {
	if ok, skipped := p.loopLog.allow(time.Now()); ok {
		p.log.Warn("a request came back to this proxy: answered 508, not forwarded; "+
			"ITLPROXY_UPSTREAM_URL, or what it resolves to, leads to the proxy itself",
			zap.String("via", p.pseudonym), zap.Int("since_last_logged", skipped))
	}
}
