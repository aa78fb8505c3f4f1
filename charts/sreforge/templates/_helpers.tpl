{{/* The base name of every object of this release (at most 63 characters). */}}
{{- define "sreforge.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sreforge.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sreforge.labels" -}}
{{ include "sreforge.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "sreforge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sreforge.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The operator's image: also the image of the Jobs and init containers it makes. */}}
{{- define "sreforge.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The image of the pods the operator runs in tenant namespaces: no scenarios in it. */}}
{{- define "sreforge.runnerImage" -}}
{{- printf "%s:%s" .Values.runnerImage.repository (.Values.runnerImage.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "sreforge.scraperLabels" -}}
{{- $items := list }}
{{- range $k, $v := .Values.networkPolicy.scraper.podLabels }}
{{- $items = append $items (printf "%s=%s" $k $v) }}
{{- end }}
{{- join "," (sortAlpha $items) }}
{{- end -}}

{{- define "sreforge.agentNamespace" -}}
{{- default .Release.Namespace .Values.agent.namespace -}}
{{- end -}}

{{/*
The bundled Prometheus' configuration. Scrape and evaluation every second, as the
local harness runs it (the scenarios' rule windows assume it). Rule files are relative
to the configuration file: rules/scenarios/<scenario>.yml for each scenario listed,
rules/rules.yml for prometheus.rules. Pods opt in with the prometheus.io/* annotations
and are labelled like the local harness' targets: job = the pod's `app` label, plus namespace,
pod, incident and scenario (the pod's sreforge.dev/incident and sreforge.dev/scenario
labels, absent when it has none). The rules keep namespace and incident on every alert,
and the operator reads only those of its Incident: Incidents sharing this Prometheus
never see each other's alerts or load. Each scenario's rules select only series of their
scenario (or of none: scenario=~"<name>|"), so Incidents of different scenarios share it
too.
*/}}
{{- define "sreforge.prometheusConfig" -}}
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files:
  # prometheus.rules (verbatim) and each scenario's, one file each
  - rules/*.yml
  - rules/scenarios/*.yml
  # the k6 runner's recording rules: its remote-write series as the generator's
  - rules/runners/*.yml
  # the target's memory from the kubelet's cAdvisor, as the local harness names it
  - rules/cluster/*.yml
scrape_configs:
  - job_name: kubernetes-pods
    kubernetes_sd_configs:
      - role: pod
        {{- with .Values.prometheus.namespaces }}
        namespaces:
          names:
            {{- toYaml . | nindent 12 }}
        {{- end }}
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape]
        action: keep
        regex: "true"
      # a finished Job's pod is not a target that went down
      - source_labels: [__meta_kubernetes_pod_phase]
        action: drop
        regex: Succeeded|Failed
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path]
        action: replace
        regex: (.+)
        target_label: __metrics_path__
      - source_labels: [__address__, __meta_kubernetes_pod_annotation_prometheus_io_port]
        action: replace
        regex: ([^:]+)(?::\d+)?;(\d+)
        replacement: $1:$2
        target_label: __address__
      - source_labels: [__meta_kubernetes_pod_label_app]
        action: replace
        regex: (.+)
        target_label: job
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
      # the Incident whose pod it is (its load, its target): whose alerts these are
      - source_labels: [__meta_kubernetes_pod_label_sreforge_dev_incident]
        action: replace
        regex: (.+)
        target_label: incident
      # and its scenario: each scenario's rules read only their own scenario's series
      - source_labels: [__meta_kubernetes_pod_label_sreforge_dev_scenario]
        action: replace
        regex: (.+)
        target_label: scenario
{{- if .Values.prometheus.cadvisor.enabled }}
  # the kubelet's cAdvisor through the API server's node proxy: containers' working set
  # (rules/cluster/target-memory.yml gives it the Incident's labels and the harness's name)
  - job_name: kubernetes-cadvisor
    scrape_interval: {{ .Values.prometheus.cadvisor.interval }}
    scrape_timeout: {{ .Values.prometheus.cadvisor.timeout }}
    scheme: https
    authorization:
      credentials_file: /var/run/secrets/kubernetes.io/serviceaccount/token
    tls_config:
      ca_file: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
    kubernetes_sd_configs:
      - role: node
    relabel_configs:
      - target_label: __address__
        replacement: kubernetes.default.svc:443
      - source_labels: [__meta_kubernetes_node_name]
        regex: (.+)
        target_label: __metrics_path__
        replacement: /api/v1/nodes/$1/proxy/metrics/cadvisor
      - source_labels: [__meta_kubernetes_node_name]
        target_label: node
    metric_relabel_configs:
      - source_labels: [__name__]
        regex: container_memory_working_set_bytes
        action: keep
{{- end }}
{{- end -}}
