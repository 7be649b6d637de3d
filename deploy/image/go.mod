module github.com/itlproxy/itlproxy/deploy/image

go 1.26.8

require (
	github.com/itlproxy/itlproxy v0.0.0-00010101000000-000000000000
	github.com/moby/buildkit v0.34.2
	github.com/moby/patternmatcher v0.6.1
	github.com/prometheus/procfs v0.22.0
	mvdan.cc/sh/v3 v3.14.1
)

require (
	github.com/agext/levenshtein v1.2.3 // indirect
	github.com/coder/websocket v1.8.15 // indirect
	github.com/containerd/typeurl/v2 v2.3.0 // indirect
	github.com/docker/go-units v0.5.0 // indirect
	github.com/moby/docker-image-spec v1.3.1 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20240319094008-0393e58bdf10 // indirect
	github.com/tonistiigi/go-csvvalue v0.0.0-20240814133006-030d3b2625d0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

// The main module, for its test helpers internal/e2e and internal/testenv,
// from this checkout.
replace github.com/itlproxy/itlproxy => ../..
