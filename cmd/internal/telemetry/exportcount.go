package telemetry

import (
	"context"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap"
)

// countedMetricExporter is the metric exporter as the periodic reader
// sees it: each failed export (refused, partly refused, past the reader's
// deadline, or pushed without the families the registry failed to
// gather) is counted, the first of an outage logged, and the export that
// ends the outage logged too. It returns nil either way: the reader would
// hand the error to OpenTelemetry's global handler, which logs each one,
// every interval of an outage.
type countedMetricExporter struct {
	sdkmetric.Exporter
	failed   prometheus.Counter
	log      *zap.Logger
	endpoint string // as the log shows it (envconfig.ShowURL)
	// gathered says why the push about to be exported lacks families.
	gathered *gatherFailure

	mu     sync.Mutex
	outage int // exports failed since the last that succeeded
}

func (e *countedMetricExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	err := e.Exporter.Export(ctx, rm)
	if gerr := e.gathered.take(); err == nil && gerr != nil {
		err = fmt.Errorf("pushed without what the registry failed to gather: %w", gerr)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case err != nil:
		e.failed.Inc()
		e.outage++
		if e.outage == 1 {
			e.log.Warn("OTLP metric export failed; failed exports are counted in "+
				"itlproxy_otlp_metric_exports_failed_total and not logged again until one succeeds",
				zap.String("endpoint", e.endpoint), zap.Error(err))
		}
	case e.outage > 0:
		e.log.Info("OTLP metric export succeeded again", zap.String("endpoint", e.endpoint), zap.Int("failed_exports", e.outage))
		e.outage = 0
	}
	return nil
}
