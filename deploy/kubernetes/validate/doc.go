// Package validate keeps deploy/kubernetes honest. Generate writes the
// manifests that carry copies of other files: the PrometheusRule, whose
// groups are deploy/prometheus/rules.yaml's, and the dashboards ConfigMap,
// whose entries are dashboards/*.json. The tests render every
// kustomization with the kustomize API, decode every object strictly
// against its Kubernetes or Prometheus Operator type, check the sidecar's
// security, probes and shutdown settings, and fail when a generated file no
// longer matches its sources.
//
// After changing rules.yaml or a dashboard, from this directory:
//
//	go generate
package validate
