{{/* Names ---------------------------------------------------------------------------------- */}}

{{- define "hookbridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object name. Truncated to 42 characters so that the longest suffix
("-worker-metrics", 15) still fits the 63-character limit of names and labels.
*/}}
{{- define "hookbridge.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 42 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 42 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 42 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "hookbridge.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hookbridge.configName" -}}
{{- printf "%s-config" (include "hookbridge.fullname" .) }}
{{- end }}

{{/* The Secret the pods read: the chart's own, or existingSecret.name. */}}
{{- define "hookbridge.secretName" -}}
{{- if .Values.existingSecret.name }}
{{- .Values.existingSecret.name }}
{{- else }}
{{- printf "%s-secret" (include "hookbridge.fullname" .) }}
{{- end }}
{{- end }}

{{- define "hookbridge.redisName" -}}
{{- printf "%s-redis" (include "hookbridge.fullname" .) }}
{{- end }}

{{- define "hookbridge.workerMetricsName" -}}
{{- printf "%s-worker-metrics" (include "hookbridge.fullname" .) }}
{{- end }}

{{- define "hookbridge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hookbridge.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "hookbridge.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* Labels ---------------------------------------------------------------------------------- */}}

{{- define "hookbridge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hookbridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "hookbridge.labels" -}}
helm.sh/chart: {{ include "hookbridge.chart" . }}
{{ include "hookbridge.selectorLabels" . }}
app.kubernetes.io/version: {{ default .Chart.AppVersion .Values.image.tag | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hookbridge
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of one component; call with (dict "ctx" $ "component" "api"). */}}
{{- define "hookbridge.componentLabels" -}}
{{ include "hookbridge.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "hookbridge.componentSelectorLabels" -}}
{{ include "hookbridge.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Settings -------------------------------------------------------------------------------- */}}

{{/*
The secret settings: environment variable -> key under .Values.secret and
.Values.existingSecret.keys. One list so that the Secret and the pods never disagree.
*/}}
{{- define "hookbridge.secretSettings" -}}
HOOKBRIDGE_API_KEYS: apiKeys
HOOKBRIDGE_NUTRIENT_API_KEY: nutrientApiKey
HOOKBRIDGE_CLOUDSQUID_API_KEY: cloudsquidApiKey
HOOKBRIDGE_UPTIQ_API_KEY: uptiqApiKey
HOOKBRIDGE_REDIS_URL: redisUrl
{{- end }}

{{/* True (non-empty) when HOOKBRIDGE_REDIS_URL comes from a Secret. */}}
{{- define "hookbridge.redisUrlInSecret" -}}
{{- if .Values.existingSecret.name }}
{{- if .Values.existingSecret.keys.redisUrl }}true{{ end }}
{{- else if .Values.secret.redisUrl }}true{{ end }}
{{- end }}

{{/* env entries for the secret settings, referencing the Secret by key. */}}
{{- define "hookbridge.secretEnv" -}}
{{- $secretName := include "hookbridge.secretName" . }}
{{- $settings := include "hookbridge.secretSettings" . | fromYaml }}
{{- range $env := keys $settings | sortAlpha }}
{{- $field := get $settings $env }}
{{- if $.Values.existingSecret.name }}
{{- $key := get $.Values.existingSecret.keys $field }}
{{- if $key }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ $secretName }}
      key: {{ $key }}
      optional: {{ not (has $field (list "apiKeys" "redisUrl")) }}
{{- end }}
{{- else if get $.Values.secret $field }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ $secretName }}
      key: {{ $env }}
{{- end }}
{{- end }}
{{- end }}

{{/* The pod annotations that roll the pods when their configuration changes. */}}
{{- define "hookbridge.checksums" -}}
checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- if .Values.existingSecret.name }}
{{- /* The chart cannot see an external Secret's content: hash the reference. */}}
checksum/secret: {{ toJson .Values.existingSecret | sha256sum }}
{{- else }}
checksum/secret: {{ include (print $.Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end }}
{{- end }}

{{/* Checks that the schema cannot express; included by the ConfigMap, which always renders. */}}
{{- define "hookbridge.validate" -}}
{{- $inSecret := include "hookbridge.redisUrlInSecret" . }}
{{- if .Values.redis.embedded.enabled }}
{{- if or .Values.redis.url $inSecret }}
{{- fail "redis.embedded.enabled points HOOKBRIDGE_REDIS_URL at the embedded Redis: leave redis.url, secret.redisUrl and existingSecret.keys.redisUrl empty" }}
{{- end }}
{{- else if eq .Values.redis.mode "url" }}
{{- if and .Values.redis.url $inSecret }}
{{- fail "set the Redis URL once: redis.url (no password) or the Secret (secret.redisUrl / existingSecret.keys.redisUrl), not both" }}
{{- end }}
{{- if not (or .Values.redis.url $inSecret) }}
{{- fail "redis.mode=url needs redis.url, secret.redisUrl or existingSecret.keys.redisUrl" }}
{{- end }}
{{- else if eq .Values.redis.mode "sentinel" }}
{{- if or .Values.redis.url $inSecret }}
{{- fail "redis.mode=sentinel: hookbridge uses Sentinel only while HOOKBRIDGE_REDIS_URL is unset; leave redis.url, secret.redisUrl and existingSecret.keys.redisUrl empty, or use redis.mode=url" }}
{{- end }}
{{- if or (empty .Values.redis.sentinel.hosts) (empty .Values.redis.sentinel.master) }}
{{- fail "redis.mode=sentinel needs redis.sentinel.hosts and redis.sentinel.master" }}
{{- end }}
{{- end }}
{{- if le (int .Values.worker.terminationGracePeriodSeconds) (int .Values.worker.shutdownGraceSeconds) }}
{{- fail "worker.terminationGracePeriodSeconds must exceed worker.shutdownGraceSeconds, or Kubernetes kills the worker mid-shutdown" }}
{{- end }}
{{- if and .Values.keda.enabled (not .Values.keda.prometheus.serverAddress) }}
{{- fail "keda.enabled needs keda.prometheus.serverAddress" }}
{{- end }}
{{- end }}

{{/* Pod pieces shared by the api and the worker --------------------------------------------- */}}

{{/* Soft spread over nodes and zones plus the user's constraints; (dict "ctx" $ "component" "api" "values" .Values.api) */}}
{{- define "hookbridge.topologySpread" -}}
{{- $constraints := list }}
{{- if .values.spreadAcrossNodes }}
{{- range $topologyKey := list "kubernetes.io/hostname" "topology.kubernetes.io/zone" }}
{{- $constraints = append $constraints (dict
      "maxSkew" 1
      "topologyKey" $topologyKey
      "whenUnsatisfiable" "ScheduleAnyway"
      "labelSelector" (dict "matchLabels" (include "hookbridge.componentSelectorLabels" $ | fromYaml))) }}
{{- end }}
{{- end }}
{{- $constraints = concat $constraints .values.topologySpreadConstraints }}
{{- with $constraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "hookbridge.podScheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
A config value as a string. Values arrive as float64 from YAML, and toString would print
52428800 as "5.24288e+07": whole numbers are printed as integers.
*/}}
{{- define "hookbridge.configValue" -}}
{{- if and (kindIs "float64" .) (eq . (float64 (int64 .))) }}
{{- int64 . | toString }}
{{- else }}
{{- toString . }}
{{- end }}
{{- end }}
