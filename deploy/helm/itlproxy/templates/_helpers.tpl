{{/* The name of the release's objects: <release>-itlproxy, or the release's
name when it already says itlproxy. */}}
{{- define "itlproxy.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "itlproxy.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{ include "itlproxy.selectorLabels" . }}
{{- end -}}

{{/* Selects the gateway's pods. */}}
{{- define "itlproxy.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "itlproxy.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default (printf "v%s" .Chart.AppVersion)) -}}
{{- end -}}

{{/* The upstream: in gateway mode the headless Service's name in the
cluster's DNS, or gateway.upstreamURL; the sidecar's loopback. */}}
{{- define "itlproxy.upstreamURL" -}}
{{- $g := .Values.gateway -}}
{{- if ne .Values.mode "gateway" -}}
{{- .Values.sidecar.upstreamURL -}}
{{- else if include "itlproxy.headlessName" . -}}
{{- printf "http://%s.%s.svc.%s:%v" (include "itlproxy.headlessName" .) .Release.Namespace $g.headlessService.clusterDomain $g.headlessService.port -}}
{{- else -}}
{{- required "gateway.upstreamURL or gateway.headlessService: the model Service itlproxy forwards to (e.g. http://vllm.llm.svc:8000), or a headless Service of the model server's pods (headlessService.create: true with its selector, or the name of yours)" $g.upstreamURL -}}
{{- end -}}
{{- end -}}

{{/* The headless Service of the model server's pods the gateway resolves:
the one the chart creates or the one named; "" when the gateway forwards to
gateway.upstreamURL. */}}
{{- define "itlproxy.headlessName" -}}
{{- $h := .Values.gateway.headlessService -}}
{{- if $h.name -}}
{{- $h.name -}}
{{- else if $h.create -}}
{{- printf "%s-upstream" (include "itlproxy.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* "dns" when the gateway resolves its upstream's name and balances over
its addresses: by default with a headless Service, or as
gateway.upstream.resolve says. */}}
{{- define "itlproxy.upstreamResolve" -}}
{{- if eq .Values.mode "gateway" -}}
{{- $resolve := .Values.gateway.upstream.resolve -}}
{{- if or (eq $resolve "dns") (and (eq $resolve "") (include "itlproxy.headlessName" .)) -}}
dns
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The OTEL_* variables the otlp values make (docs/otlp.md), as YAML: with
traces, the base URL both signals take; without, the metrics' own URL (to
which http/protobuf adds the path the base URL would get). */}}
{{- define "itlproxy.otlpEnv" -}}
{{- $o := .Values.otlp -}}
{{- if $o.endpoint -}}
{{- if not (or $o.metrics $o.traces) -}}
{{- fail "otlp.endpoint is set, and otlp.metrics and otlp.traces are both false: say what to push there" -}}
{{- end -}}
{{- if $o.traces }}
OTEL_EXPORTER_OTLP_ENDPOINT: {{ $o.endpoint | quote }}
OTEL_EXPORTER_OTLP_PROTOCOL: {{ $o.protocol | quote }}
{{- else }}
OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: {{ ternary (printf "%s/v1/metrics" (trimSuffix "/" $o.endpoint)) $o.endpoint (eq $o.protocol "http/protobuf") | quote }}
OTEL_EXPORTER_OTLP_METRICS_PROTOCOL: {{ $o.protocol | quote }}
{{- end }}
{{- if $o.metrics }}
OTEL_METRICS_EXPORTER: "prometheus,otlp"
OTEL_METRIC_EXPORT_INTERVAL: {{ $o.interval | int64 | quote }}
OTEL_METRIC_EXPORT_TIMEOUT: {{ $o.timeout | int64 | quote }}
OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE: {{ $o.temporality | quote }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* The itlproxy container, in both modes; the sidecar adds its
restartPolicy. The addresses, SLO file and shutdown settings are env, which
overrides the env ConfigMap: they agree with the ports, probes, volume and
grace period here. */}}
{{- define "itlproxy.container" -}}
name: itlproxy
image: {{ include "itlproxy.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
ports:
  - name: proxy
    containerPort: {{ .Values.ports.proxy }}
  - name: admin
    containerPort: {{ .Values.ports.admin }}
envFrom:
  - configMapRef:
      name: {{ include "itlproxy.fullname" . }}-env
env:
  - name: ITLPROXY_UPSTREAM_URL
    value: {{ include "itlproxy.upstreamURL" . | quote }}
  {{- if include "itlproxy.upstreamResolve" . }}
  {{- $u := .Values.gateway.upstream }}
  # Every address of the name, one per ready pod, re-resolved.
  - name: ITLPROXY_UPSTREAM_RESOLVE
    value: dns
  - name: ITLPROXY_UPSTREAM_RESOLVE_INTERVAL
    value: {{ $u.resolveInterval | quote }}
  - name: ITLPROXY_UPSTREAM_MAX_ENDPOINTS
    value: {{ int $u.maxEndpoints | quote }}
  {{- with $u.resolver }}
  - name: ITLPROXY_UPSTREAM_RESOLVER
    value: {{ . | quote }}
  {{- end }}
  {{- end }}
  - name: ITLPROXY_LISTEN_ADDR
    value: ":{{ .Values.ports.proxy }}"
  - name: ITLPROXY_ADMIN_ADDR
    value: ":{{ .Values.ports.admin }}"
  - name: ITLPROXY_SLO_FILE
    value: /etc/itlproxy/slo.yaml
  - name: ITLPROXY_SHUTDOWN_DELAY
    value: {{ .Values.shutdown.delay | quote }}
  - name: ITLPROXY_SHUTDOWN_TIMEOUT
    value: {{ .Values.shutdown.timeout | quote }}
  {{- if .Values.web.enabled }}
  - name: ITLPROXY_WEB_CONFIG_FILE
    value: /etc/itlproxy-web/web.yml
  {{- end }}
# On the admin port: the proxy port carries only proxied traffic. The
# probes' paths answer without credentials, over the same TLS as the rest
# (the kubelet does not verify the certificate).
readinessProbe:
  httpGet:
    path: /readyz
    port: admin
    {{- if include "itlproxy.web.https" . }}
    scheme: HTTPS
    {{- end }}
  periodSeconds: 5
  timeoutSeconds: 2
  failureThreshold: 2
livenessProbe:
  httpGet:
    path: /healthz
    port: admin
    {{- if include "itlproxy.web.https" . }}
    scheme: HTTPS
    {{- end }}
  periodSeconds: 10
  timeoutSeconds: 2
  failureThreshold: 3
resources:
  {{- toYaml .Values.resources | nindent 2 }}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  readOnlyRootFilesystem: true
  allowPrivilegeEscalation: false
  capabilities:
    drop: ["ALL"]
  seccompProfile:
    type: RuntimeDefault
volumeMounts:
  - name: itlproxy-slo
    mountPath: /etc/itlproxy
    readOnly: true
  {{- if .Values.web.enabled }}
  - name: itlproxy-web
    mountPath: /etc/itlproxy-web
    readOnly: true
  {{- end }}
{{- end -}}

{{/* The SLO file's volume and, with web.enabled, the web configuration
file's: one directory projecting the chart's Secret (web.yml) and the
certificate's Secret (tls.crt, tls.key, and ca.crt when cert-manager wrote
it), which the file names by relative paths. The kubelet updates both in
place: itlproxy takes them at the next request and handshake. */}}
{{- define "itlproxy.volumes" -}}
- name: itlproxy-slo
  configMap:
    name: {{ include "itlproxy.fullname" . }}-slo
{{- if .Values.web.enabled }}
- name: itlproxy-web
  projected:
    sources:
      - secret:
          name: {{ include "itlproxy.fullname" . }}-web
      {{- if include "itlproxy.web.https" . }}
      - secret:
          name: {{ required "web.tlsSecret: the kubernetes.io/tls Secret of the admin port's certificate, which web.config's tls_server_config names (a cert-manager Certificate writes one)" .Values.web.tlsSecret }}
      {{- end }}
{{- end }}
{{- end -}}

{{/* "true" when the admin port speaks HTTPS: the web configuration sets a
certificate. */}}
{{- define "itlproxy.web.https" -}}
{{- if and .Values.web.enabled (hasKey .Values.web.config "tls_server_config") -}}
true
{{- end -}}
{{- end -}}

{{/* How the monitor authenticates to the admin port, with web.enabled: the
scheme, tlsConfig and basicAuth of its endpoint, in the Prometheus
Operator's terms. */}}
{{- define "itlproxy.monitor.web" -}}
{{- $m := .Values.monitoring.monitor -}}
{{- $tlsConfig := get $m "tlsConfig" -}}
{{- $basicAuth := get $m "basicAuth" -}}
{{- if include "itlproxy.web.https" . }}
scheme: https
{{- if not $tlsConfig }}
{{- fail "monitoring.monitor.tlsConfig: the admin port speaks HTTPS (web.config sets tls_server_config): say how Prometheus verifies its certificate, e.g. {ca: {secret: {name: <web.tlsSecret>, key: ca.crt}}, serverName: <a name in the certificate>}" }}
{{- end }}
tlsConfig:
  {{- toYaml $tlsConfig | nindent 2 }}
{{- end }}
{{- if and .Values.web.enabled (get .Values.web.config "basic_auth_users") }}
{{- if not $basicAuth }}
{{- fail "monitoring.monitor.basicAuth: the admin port asks for the credentials of web.config's basic_auth_users: name the Secret that holds Prometheus' user name and password, e.g. {username: {name: itlproxy-scrape, key: username}, password: {name: itlproxy-scrape, key: password}}" }}
{{- end }}
basicAuth:
  {{- toYaml $basicAuth | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The sidecar snippet, to merge into another chart's pod spec: the native
sidecar (a list item of initContainers: starts before the model server and
stops after it, Kubernetes 1.29 or later), its volume (a list item of
volumes) and the pod label the PodMonitor selects. */}}
{{- define "itlproxy.sidecar.initContainer" -}}
- {{ include "itlproxy.container" . | nindent 2 | trim }}
  restartPolicy: Always
{{- end -}}

{{- define "itlproxy.sidecar.volume" -}}
{{ include "itlproxy.volumes" . }}
{{- end -}}

{{- define "itlproxy.sidecar.podLabels" -}}
itlproxy/sidecar: "true"
{{- end -}}

{{/* Labels of the objects Prometheus or Grafana pick up. */}}
{{- define "itlproxy.withLabels" -}}
{{- $labels := merge (dict) (.extra | default dict) (include "itlproxy.labels" .root | fromYaml) -}}
{{- toYaml $labels -}}
{{- end -}}
