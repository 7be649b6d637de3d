// Package scrape reads Prometheus metrics back: gathered from a registry,
// or parsed from a /metrics response as Prometheus parses it. It looks
// series up by their labels, sums classic histograms, and estimates
// quantiles from their buckets as PromQL's histogram_quantile does.
//
// itlproxy's demo table and itlbench's comparison with the proxy read
// itlproxy's metrics through it, and so do the tests, so that there is one
// reading of a series and one quantile arithmetic.
package scrape
