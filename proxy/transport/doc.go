// Package transport builds itlproxy's HTTP transport to the upstream, which
// the proxy uses and which itlbench's plain baseline proxy shares, so that
// the two differ only in what itlproxy adds.
package transport
