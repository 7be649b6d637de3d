package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/itlproxy/itlproxy/cmd/internal/demo"
	"github.com/itlproxy/itlproxy/cmd/internal/llmsim"
)

// runDemo serves the proxy in front of an in-process simulated upstream,
// drives it with a few streaming clients, and prints a table of what the
// proxy measured until ctx is canceled.
func (s *server) runDemo(ctx context.Context, stdout io.Writer) error {
	sim := llmsim.New(demo.Models...)
	simLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("simulated upstream: %w", err)
	}
	simSrv := &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = simSrv.Serve(simLn) }()
	defer simSrv.Close()
	s.cfg.UpstreamURL = "http://" + simLn.Addr().String()

	return s.run(ctx, func(proxyAddr, adminAddr net.Addr) func() {
		target := "http://" + loopback(proxyAddr)
		if s.recorder != nil {
			fmt.Fprintf(stdout, "live page: %s://%s/ (open it in a browser)\n", s.cfg.web.Scheme(), loopback(adminAddr))
		}
		fmt.Fprintf(stdout, "itlproxy demo: proxy on %s, simulated upstream on %s, %d clients\n", target, simLn.Addr(), s.cfg.DemoClients)
		fmt.Fprintf(stdout, "metrics: curl -s %s://%s/metrics | grep itlproxy_\n", s.cfg.web.Scheme(), loopback(adminAddr))
		fmt.Fprintf(stdout, "try:     curl -N %s/v1/chat/completions -d '{\"model\":%q,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'\n\n",
			target, sim.Models()[0])
		return demo.Run(ctx, target, sim.Models(), s.cfg.DemoClients, s.reg, stdout, s.log)
	})
}

// loopback returns addr with an unspecified host replaced by 127.0.0.1,
// so that it can be dialed.
func loopback(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
