package main

import (
	"fmt"
	"strings"
)

// csv is one line per run with the tables' figures.
func (res *results) csv() string {
	var b strings.Builder
	b.WriteString("run,streams,target,requests_ok,failed,cut_cleanly,token_events,ttft_p50_ms,ttft_p99_ms,itl_p50_ms,itl_p99_ms,added_ttft_p50_ms,added_ttft_p99_ms,added_itl_p50_ms,added_itl_p99_ms,cpu_seconds,cpu_ms_per_1k_events,cpu_x_nginx,cpu_x_plain,rss_idle_mib,rss_peak_mib,rss_kib_per_stream,transit_p50_ms,transit_p99_ms," +
		"own_delay_mean_us,own_delay_p50_us,own_delay_p99_us,wait_to_run_p50_us,wait_to_run_p99_us,client_write_p50_us,client_write_p99_us,request_leg_p99_us,kernel_share_p50_us_estimate\n")
	line := func(run string, streams int, target string, r report, d *report, x func(string) string, own string) {
		t := r.Total
		fmt.Fprintf(&b, "%s,%d,%s,%d,%d,%d,%d,%s,%s,%s,%s", run, streams, target, t.Requests.OK, t.Requests.Failed, t.EndedWithoutDone, t.TokenEvents,
			ms(t.TTFT.P50), ms(t.TTFT.P99), ms(t.ITL.P50), ms(t.ITL.P99))
		if d != nil && target != "direct" {
			dt := d.Total
			fmt.Fprintf(&b, ",%s,%s,%s,%s", ms(t.TTFT.P50-dt.TTFT.P50), ms(t.TTFT.P99-dt.TTFT.P99), ms(t.ITL.P50-dt.ITL.P50), ms(t.ITL.P99-dt.ITL.P99))
		} else {
			b.WriteString(",,,,")
		}
		if p := r.Processes; p != nil && t.TokenEvents > 0 {
			fmt.Fprintf(&b, ",%.2f,%.2f,%s,%s,%.1f,%.1f,%.1f", p.CPUSeconds, 1e6*p.CPUSeconds/float64(t.TokenEvents), x("nginx"), x("plain"),
				mib(p.RSSBeforeBytes), mib(p.RSSPeakBytes), float64(p.RSSPeakBytes-p.RSSBeforeBytes)/1024/float64(streams))
		} else {
			b.WriteString(",,,,,,,")
		}
		if t.Transit.Count > 0 {
			fmt.Fprintf(&b, ",%s,%s", ms(t.Transit.P50), ms(t.Transit.P99))
		} else {
			b.WriteString(",,")
		}
		b.WriteString(own + "\n")
	}
	for i := range res.rows {
		r := &res.rows[i]
		var d *report
		if dr := res.find(r.run, r.streams, "direct"); dr != nil {
			d = &dr.rep
		}
		line(r.run, r.streams, r.target, r.rep, d, func(other string) string {
			if v, ok := res.ratio(r, other, (*row).cpuPer1k); ok {
				return fmt.Sprintf("%.3f", v)
			}
			return ""
		}, res.ownCSV(r))
	}
	if res.big != nil {
		line("big", res.big.Concurrency, "itlproxy", *res.big, nil, func(string) string { return "" }, strings.Repeat(",", ownCSVColumns))
	}
	return b.String()
}

// ownCSVColumns is how many columns ownCSV writes.
const ownCSVColumns = 9

// ownCSV is the own account's columns of r, each after a comma, in
// microseconds: empty where it was not read, "<10.0" for a quantile
// within the first bucket, ">=" before a kernel's share computed with
// such a bound.
func (res *results) ownCSV(r *row) string {
	own := r.own()
	if own == nil {
		return strings.Repeat(",", ownCSVColumns)
	}
	cell := func(q bounded) string {
		if q.Seconds == nil {
			return ""
		}
		return map[string]string{"upper": "<", "lower": ">"}[q.Bound] + micro(*q.Seconds)
	}
	mean := ""
	if m := own.EventDelay.Mean; m != nil {
		mean = micro(*m)
	}
	share := ""
	if s, atLeast, ok := res.kernelShare(r); ok {
		share = micro(s)
		if atLeast {
			share = ">=" + share
		}
	}
	e, s, w := own.EventDelay, own.SchedulerLatency, own.ClientWrite
	cells := []string{mean, cell(e.P50), cell(e.P99), cell(s.P50), cell(s.P99), cell(w.P50), cell(w.P99), cell(own.RequestForward.P99), share}
	return "," + strings.Join(cells, ",")
}
