#!/usr/bin/env bash
# Checks rules.yaml and runs rules_test.yaml with promtool from Prometheus 3
# (CI checks them with Debian's Prometheus 2.42). promtool 3 is built from
# the Go module proxy into a temporary module; the first build downloads
# and compiles Prometheus, which takes several minutes.
#
#   deploy/prometheus/check-prometheus3.sh [prometheus module version]
set -euo pipefail
version=${1:-v0.310.0} # Prometheus 3.10
here=$(cd "$(dirname "$0")" && pwd)
bin="${TMPDIR:-/tmp}/itlproxy-promtool-${version}"
if [ ! -x "$bin" ]; then
	build=$(mktemp -d)
	trap 'rm -rf "$build"' EXIT
	(cd "$build" && go mod init promtool-build >/dev/null 2>&1 &&
		go get "github.com/prometheus/prometheus/cmd/promtool@${version}" &&
		go build -o "$bin" github.com/prometheus/prometheus/cmd/promtool)
fi
cd "$here"
"$bin" check rules rules.yaml
"$bin" test rules rules_test.yaml
