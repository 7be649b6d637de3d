// Package validate keeps deploy/kubernetes and the Helm chart
// deploy/helm/itlproxy honest. Generate writes the files that carry copies
// of other files: the PrometheusRule, whose groups are
// deploy/prometheus/rules.yaml's, the dashboards ConfigMap, whose entries
// are dashboards/*.json, and the chart's copies of both. The tests render
// every kustomization with the kustomize API and the chart, in both its
// modes, with Helm's SDK, decode every object strictly against its
// Kubernetes or Prometheus Operator type, check itlproxy's security,
// probes and shutdown settings wherever it runs (a sidecar, or a gateway
// in front of a headless Service of the model server's pods that it
// resolves), run helm lint's rules and
// the chart's values schema, and fail when a generated file no longer
// matches its sources.
//
// After changing rules.yaml or a dashboard, from this directory:
//
//	go generate
package validate
