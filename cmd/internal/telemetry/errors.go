package telemetry

import (
	"go.opentelemetry.io/otel"
	"go.uber.org/zap"
)

// handleErrors sends what the OpenTelemetry SDK reports to its global
// error handler (a batch of spans that failed to export, above all) to
// itlproxy's log instead of the standard library's. Failed metric exports
// never reach it: countedMetricExporter counts them and logs one line per
// outage.
func handleErrors(log *zap.Logger) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("OpenTelemetry export failed", zap.Error(err))
	}))
}
