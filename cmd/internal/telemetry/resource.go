package telemetry

import (
	"crypto/rand"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
)

// instanceID is this process's service.instance.id: a random UUID (version
// 4), as the resource conventions advise, made once so that spans and
// metrics name the same instance. Series pushed from two replicas must
// differ in it, or a receiver would take them for one series (Prometheus'
// OTLP receiver makes it the instance label).
var instanceID = sync.OnceValue(func() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
})

// newResource is the resource of what itlproxy exports: the SDK's default
// (telemetry.sdk.*), service.instance.id, OTEL_RESOURCE_ATTRIBUTES over
// it, and service.name and service.version over those, as the
// specification ranks OTEL_SERVICE_NAME over OTEL_RESOURCE_ATTRIBUTES.
func newResource(cfg Config, version string) (*resource.Resource, error) {
	attrs, _ := resourceAttributes(cfg.OTELResourceAttrs) // validated
	attrs = append([]attribute.KeyValue{attribute.String("service.instance.id", instanceID())}, attrs...)
	attrs = append(attrs,
		attribute.String("service.name", cfg.OTELServiceName),
		attribute.String("service.version", version))
	// A set keeps the last value of a key given twice.
	return resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
}
