package proxy

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// part is a piece of the work the proxy does on top of forwarding, which a
// benchmark build can switch off to measure what it costs
// (BENCHMARKS.md, "Where the cost goes"). A build of the product has no
// switch: partsOff is the constant 0 there (parts_product.go), and the
// compiler drops every check of it. A build with the tag itlproxy_parts
// reads the parts to switch off from ITLPROXY_PARTS_OFF at start
// (parts_bench.go); its measurements are then incomplete by design, and
// it is never shipped.
type part uint8

const (
	// partRecorder: streams are not handed to the stream recorder.
	partRecorder part = 1 << iota
	// partSessions: requests carry no session id.
	partSessions
	// partObservations: token events are counted by the stream's tally but
	// not observed into metrics (TTFT, gaps, load bands, exemplars, SLOs,
	// tokens per event).
	partObservations
	// partSplit: the response's bytes are not split into events nor read.
	partSplit
	// partExchange: no exchange (ids, labels, counters, stream start and
	// end): the request goes straight to the reverse proxy.
	partExchange
	// partRouting: no router and no request inspection (the body is not
	// read for its model): every request is passed through.
	partRouting
)

type namedPart struct {
	name string
	part part
}

// partNames are the names ITLPROXY_PARTS_OFF takes, in the order a
// benchmark switches them off one after another.
var partNames = []namedPart{
	{"recorder", partRecorder},
	{"sessions", partSessions},
	{"observations", partObservations},
	{"split", partSplit},
	{"exchange", partExchange},
	{"routing", partRouting},
}

// parseParts reads a comma-separated list of part names.
func parseParts(s string) (part, error) {
	var off part
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		i := slices.IndexFunc(partNames, func(p namedPart) bool { return p.name == name })
		if i < 0 {
			return 0, fmt.Errorf("unknown part %q", name)
		}
		off |= partNames[i].part
	}
	return off, nil
}

// bare forwards a request without an exchange, as the plain Go proxy the
// benchmarks compare with does: only in a benchmark build without
// exchanges.
func (p *Proxy) bare(w http.ResponseWriter, r *http.Request) {
	// As forward does: the transport may still read the request body
	// when the response starts.
	_ = http.NewResponseController(w).EnableFullDuplex()
	p.rp.ServeHTTP(w, r)
}

// on reports whether part p is switched on: always, outside a benchmark build.
func (p part) on() bool { return partsOff&p == 0 }
