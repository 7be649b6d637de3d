// Package e2e is what the end-to-end tests share: the itlproxy binary
// built and running on loopback, an upstream streaming models with
// controlled timing (and speaking the Realtime API over a WebSocket:
// realtime.go), a load of clients, Debian's Prometheus scraping the
// proxy, and a page rendered in headless Chromium (chromium.go). Those tests check the files the project ships (the
// Dockerfile, the dashboards, the rules) and live next to them; the
// command's own tests use the binary too.
package e2e
