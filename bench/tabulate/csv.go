package main

import (
	"fmt"
	"strings"
)

// csv is one line per run with the tables' figures.
func (res *results) csv() string {
	var b strings.Builder
	b.WriteString("run,streams,target,requests_ok,failed,cut_cleanly,token_events,ttft_p50_ms,ttft_p99_ms,itl_p50_ms,itl_p99_ms,added_ttft_p50_ms,added_ttft_p99_ms,added_itl_p50_ms,added_itl_p99_ms,cpu_seconds,cpu_ms_per_1k_events,cpu_x_nginx,cpu_x_plain,rss_idle_mib,rss_peak_mib,rss_kib_per_stream,transit_p50_ms,transit_p99_ms," +
		"own_delay_mean_us,own_delay_p50_us,own_delay_p99_us,wait_to_run_mean_us,wait_to_run_p50_us,wait_to_run_p99_us," +
		"client_write_mean_us,client_write_p50_us,client_write_p99_us,request_leg_p99_us,kernel_share_by_means_us,kernel_share_by_p50s_us\n")
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
const ownCSVColumns = 12

// ownCSV is the own account's columns of r, each after a comma, in
// microseconds: empty where it was not read, "<10.0" for a quantile
// within the first bucket, ">=" before a kernel's share computed with
// such a bound.
func (res *results) ownCSV(r *row) string {
	own := r.own()
	if own == nil {
		return strings.Repeat(",", ownCSVColumns)
	}
	q := func(q bounded) string {
		if q.Seconds == nil {
			return ""
		}
		return map[string]string{"upper": "<", "lower": ">"}[q.Bound] + micro(*q.Seconds)
	}
	mean := func(m *float64) string {
		if m == nil {
			return ""
		}
		return micro(*m)
	}
	kernel := func(s split, ok bool) string {
		switch {
		case !ok:
			return ""
		case s.seenAtMost:
			return ">=" + micro(s.kernel())
		}
		return micro(s.kernel())
	}
	e, s, w := own.EventDelay, own.SchedulerLatency, own.ClientWrite
	cells := []string{mean(e.Mean), q(e.P50), q(e.P99), mean(s.Mean), q(s.P50), q(s.P99), mean(w.Mean), q(w.P50), q(w.P99),
		q(own.RequestForward.P99), kernel(res.splitByMeans(r)), kernel(res.splitByMedians(r))}
	return "," + strings.Join(cells, ",")
}
