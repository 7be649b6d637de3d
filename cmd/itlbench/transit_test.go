package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/llmsim"
	"github.com/itlproxy/itlproxy/proxy/events"
)

// stampedStream has events with and without stamps, a stamp after the
// data line, CRLF line ends, and stamps that are not: each event must see
// the stamp of its own lines, or none.
const stampedStream = ": sent=111\ndata: 1\n\n" +
	"data: 2\n\n" +
	": ping\r\n: sent=333\r\ndata: 3\r\n\r\n" +
	": sent=12x\ndata: 4\n\n" +
	"data: 5\n: sent=555\n\n" +
	": sent=99999999999999999999\ndata: 6\n\n" +
	":sent=7\ndata: 7\n\n"

var stampedWant = []int64{111, 0, 333, 0, 555, 0, 0}

// TestTransitStampsSplits: whatever the reads' boundaries (every cut in
// two, and byte by byte), each event sees exactly its own stamp.
func TestTransitStampsSplits(t *testing.T) {
	in := []byte(stampedStream)
	check := func(name string, pieces [][]byte) {
		t.Helper()
		var st transitStamps
		var got []int64
		scan := events.NewScanner(events.ChatCompletions, maxEventBytes, func(_ events.Event, at events.Stamp) {
			got = append(got, st.sent)
			st.take(at.At)
		})
		for _, p := range pieces {
			st.write(p, scan, time.Now())
		}
		if !slices.Equal(got, stampedWant) {
			t.Errorf("%s: stamps %v, want %v", name, got, stampedWant)
		}
	}
	for cut := range len(in) + 1 {
		check("cut at "+strconv.Itoa(cut), [][]byte{in[:cut], in[cut:]})
	}
	var bytewise [][]byte
	for i := range in {
		bytewise = append(bytewise, in[i:i+1])
	}
	check("byte by byte", bytewise)
}

// TestTransitStampsAllocs: finding stamps costs no allocation per read.
func TestTransitStampsAllocs(t *testing.T) {
	var st transitStamps
	scan := events.NewScanner(events.ChatCompletions, maxEventBytes, func(_ events.Event, at events.Stamp) { st.take(at.At) })
	in := []byte(stampedStream)
	now := time.Now()
	if n := testing.AllocsPerRun(200, func() { st.write(in[:40], scan, now); st.write(in[40:], scan, now) }); n != 0 {
		t.Errorf("%v allocations per stream, want 0", n)
	}
}

// TestSimStamps: llmsim with Stamp puts one send time before the data
// line of every event, taken between the request and the event's
// arrival; without it, no event has one.
func TestSimStamps(t *testing.T) {
	for _, stamp := range []bool{false, true} {
		up := newSimServer(t, llmsim.Model{Stamp: stamp})
		before := time.Now().UnixNano()
		resp, err := http.Post(up.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","stream":true,"max_tokens":3,"stream_options":{"include_usage":true}}`))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		after := time.Now().UnixNano()
		if err != nil {
			t.Fatal(err)
		}
		evs := strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n")
		if len(evs) != 6 { // role, 3 tokens, usage, [DONE]
			t.Fatalf("stamp %v: %d events, want 6:\n%s", stamp, len(evs), body)
		}
		for _, ev := range evs {
			lines := strings.Split(ev, "\n")
			if !stamp {
				if len(lines) != 1 || !strings.HasPrefix(ev, "data: ") {
					t.Errorf("unstamped event %q", ev)
				}
				continue
			}
			sent, err := strconv.ParseInt(strings.TrimPrefix(lines[0], llmsim.StampPrefix), 10, 64)
			if len(lines) != 2 || !strings.HasPrefix(lines[0], llmsim.StampPrefix) || !strings.HasPrefix(lines[1], "data: ") ||
				err != nil || sent < before || sent > after {
				t.Errorf("stamped event %q: want %q with a time in [%d, %d], then data", ev, llmsim.StampPrefix, before, after)
			}
		}
	}
}

// holdingRelay forwards a stream from upstream, holding each event back
// by hold before it passes it on.
func holdingRelay(t *testing.T, upstream string, hold time.Duration) *httptest.Server {
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Post(upstream+r.URL.Path, "application/json", r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		rc := http.NewResponseController(w)
		sc := bufio.NewScanner(resp.Body)
		sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
			if i := bytes.Index(data, []byte("\n\n")); i >= 0 {
				return i + 2, data[:i+2], nil
			}
			if atEOF && len(data) > 0 {
				return len(data), data, nil
			}
			return 0, nil, nil
		})
		for sc.Scan() {
			time.Sleep(hold)
			if _, err := w.Write(sc.Bytes()); err != nil || rc.Flush() != nil {
				return
			}
		}
	}))
	t.Cleanup(relay.Close)
	return relay
}

// TestTransit: itlbench measures each token event's transit from the
// stamped upstream: small straight from it, at least the hold through a
// relay that holds each event back, and not at all without stamps.
func TestTransit(t *testing.T) {
	const hold = 30 * time.Millisecond
	stamped := newSimServer(t, llmsim.Model{TTFT: time.Millisecond, ITL: time.Millisecond, Stamp: true})
	plain := newSimServer(t, simModel(time.Millisecond))
	cases := []struct {
		name   string
		url    string
		lo, hi time.Duration // bounds of the transit's p50; hi 0: no transit
	}{
		{"direct", stamped.URL, 0, 50 * time.Millisecond},
		{"held by a relay", holdingRelay(t, stamped.URL, hold).URL, hold, time.Minute},
		{"unstamped", plain.URL, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"-url", c.url + "/v1", "-model", "m", "-requests", "4", "-c", "2", "-max-tokens", "5"}
			rep, out, err := benchJSON(t, context.Background(), args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			tr := rep.Total.Transit
			var text bytes.Buffer
			textErr := run(context.Background(), args, &text, io.Discard)
			hasRow := strings.Contains(strings.Join(strings.Fields(text.String()), " "), " transit 20 ")
			if c.hi == 0 {
				if tr.Count != 0 || textErr != nil || strings.Contains(text.String(), "transit") {
					t.Errorf("transit count %d without stamps (%v), text report:\n%s", tr.Count, textErr, text.String())
				}
				return
			}
			if tr.Count != uint64(rep.Total.TokenEvents) || tr.Count != 20 {
				t.Errorf("transit count %d, token events %d; want 20 of each", tr.Count, rep.Total.TokenEvents)
			}
			between(t, "transit p50", tr.P50, c.lo.Seconds(), c.hi.Seconds())
			between(t, "transit min", tr.Min, c.lo.Seconds(), c.hi.Seconds())
			if textErr != nil || !hasRow {
				t.Errorf("the text report lacks a transit row (%v):\n%s", textErr, text.String())
			}
		})
	}
}
