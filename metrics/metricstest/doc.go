// Package metricstest reads exported metrics back in tests: from a
// registry, or from a /metrics scrape parsed as Prometheus parses it.
package metricstest
