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

{{- define "itlproxy.upstreamURL" -}}
{{- if eq .Values.mode "gateway" -}}
{{- required "gateway.upstreamURL: the model Service itlproxy forwards to, e.g. http://vllm.llm.svc:8000" .Values.gateway.upstreamURL -}}
{{- else -}}
{{- .Values.sidecar.upstreamURL -}}
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
# On the admin port: the proxy port carries only proxied traffic.
readinessProbe:
  httpGet:
    path: /readyz
    port: admin
  periodSeconds: 5
  timeoutSeconds: 2
  failureThreshold: 2
livenessProbe:
  httpGet:
    path: /healthz
    port: admin
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
{{- end -}}

{{- define "itlproxy.volumes" -}}
- name: itlproxy-slo
  configMap:
    name: {{ include "itlproxy.fullname" . }}-slo
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
