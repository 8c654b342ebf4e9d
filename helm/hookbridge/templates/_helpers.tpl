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
HOOKBRIDGE_REDIS_URL: redisUrl
HOOKBRIDGE_REDIS_PASSWORD: redisPassword
HOOKBRIDGE_REDIS_SENTINEL_PASSWORD: redisSentinelPassword
HOOKBRIDGE_SECRET_KEYS: secretKeys
{{- end }}

{{/* True (non-empty) when HOOKBRIDGE_REDIS_URL comes from a Secret. */}}
{{- define "hookbridge.redisUrlInSecret" -}}
{{- include "hookbridge.secretHas" (dict "ctx" . "field" "redisUrl") }}
{{- end }}

{{/* env entries for the secret settings, referencing the Secret by key. */}}
{{- define "hookbridge.secretEnv" -}}
{{- $secretName := include "hookbridge.secretName" . }}
{{- $settings := include "hookbridge.secretSettings" . | fromYaml }}
{{- range $env := keys $settings | sortAlpha }}
{{- $field := get $settings $env }}
{{- if $.Values.existingSecret.name }}
{{- $key := get $.Values.existingSecret.keys $field }}
{{- if and $key $.Values.secretsAsFiles }}
- name: {{ $env }}_FILE
  value: /etc/hookbridge/secrets/{{ $key }}
{{- else if $key }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ $secretName }}
      key: {{ $key }}
      optional: {{ not (has $field (list "apiKeys" "redisUrl" "redisPassword" "redisSentinelPassword")) }}
{{- end }}
{{- else if and (get $.Values.secret $field) $.Values.secretsAsFiles }}
- name: {{ $env }}_FILE
  value: /etc/hookbridge/secrets/{{ $env }}
{{- else if get $.Values.secret $field }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ $secretName }}
      key: {{ $env }}
{{- end }}
{{- end }}
{{- include "hookbridge.vendorSecretEnv" . }}
{{- end }}

{{/*
Vendors, generically: .Values.vendors.<name> for any installed vendor (hookbridge's own or a plugin's).
Its API key (HOOKBRIDGE_<NAME>_API_KEY) comes from, in this order: its own Secret (existingSecret, under
key, default HOOKBRIDGE_<NAME>_API_KEY; mounted at /etc/hookbridge/vendor-secrets/<name> with
secretsAsFiles), the release's existingSecret.name (under key, optional unless secretsAsFiles; key: ""
reads none), or apiKey put in the chart's Secret. Its settings are HOOKBRIDGE_<NAME>_<SETTING> in the
ConfigMap.
*/}}
{{- define "hookbridge.vendorKeyEnv" -}}
{{- printf "HOOKBRIDGE_%s_API_KEY" (upper .) }}
{{- end }}

{{- define "hookbridge.vendorSecretEnv" -}}
{{- range $name := keys ($.Values.vendors | default dict) | sortAlpha }}
{{- $v := get $.Values.vendors $name | default dict }}
{{- $env := include "hookbridge.vendorKeyEnv" $name }}
{{- $key := ternary $v.key $env (hasKey $v "key") }}
{{- if $v.existingSecret }}
{{- if $.Values.secretsAsFiles }}
- name: {{ $env }}_FILE
  value: /etc/hookbridge/vendor-secrets/{{ $name }}/{{ $key }}
{{- else }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ $v.existingSecret }}
      key: {{ $key }}
{{- end }}
{{- else if and $.Values.existingSecret.name $key }}
{{- if $.Values.secretsAsFiles }}
- name: {{ $env }}_FILE
  value: /etc/hookbridge/secrets/{{ $key }}
{{- else }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.existingSecret.name }}
      key: {{ $key }}
      optional: true
{{- end }}
{{- else if and $v.apiKey (not $.Values.existingSecret.name) }}
{{- if $.Values.secretsAsFiles }}
- name: {{ $env }}_FILE
  value: /etc/hookbridge/secrets/{{ $env }}
{{- else }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ include "hookbridge.secretName" $ }}
      key: {{ $env }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The chart Secret's vendor keys: HOOKBRIDGE_<NAME>_API_KEY -> apiKey, for vendors without a Secret. */}}
{{- define "hookbridge.vendorSecretData" -}}
{{- $data := dict }}
{{- range $name, $v := ($.Values.vendors | default dict) }}
{{- if and $v $v.apiKey (not $v.existingSecret) }}
{{- $_ := set $data (include "hookbridge.vendorKeyEnv" $name) $v.apiKey }}
{{- end }}
{{- end }}
{{- toYaml $data }}
{{- end }}

{{/* The vendors' own Secrets, as volumes and mounts with secretsAsFiles. */}}
{{- define "hookbridge.vendorSecretVolumes" -}}
{{- if .Values.secretsAsFiles }}
{{- range $name := keys (.Values.vendors | default dict) | sortAlpha }}
{{- $v := get $.Values.vendors $name | default dict }}
{{- if $v.existingSecret }}
- name: vendor-{{ $name | replace "_" "-" }}
  secret:
    secretName: {{ $v.existingSecret }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- define "hookbridge.vendorSecretMounts" -}}
{{- if .Values.secretsAsFiles }}
{{- range $name := keys (.Values.vendors | default dict) | sortAlpha }}
{{- $v := get $.Values.vendors $name | default dict }}
{{- if $v.existingSecret }}
- name: vendor-{{ $name | replace "_" "-" }}
  mountPath: /etc/hookbridge/vendor-secrets/{{ $name }}
  readOnly: true
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Vendor settings given twice (config and vendors.<name>.settings), or a key with nowhere to go. */}}
{{- define "hookbridge.validateVendors" -}}
{{- range $name, $v := (.Values.vendors | default dict) }}
{{- $v = $v | default dict }}
{{- range $setting, $_ := ($v.settings | default dict) }}
{{- $key := printf "%s_%s" (upper $name) $setting }}
{{- if hasKey $.Values.config $key }}
{{- fail (printf "HOOKBRIDGE_%s is set twice: in config.%s and in vendors.%s.settings.%s; keep one" $key $key $name $setting) }}
{{- end }}
{{- end }}
{{- if and $v.apiKey (or $v.existingSecret $.Values.existingSecret.name) }}
{{- fail (printf "vendors.%s.apiKey goes into the chart's Secret, which is not made with existingSecret.name or vendors.%s.existingSecret: put the key in that Secret" $name $name) }}
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
{{- $refs := list }}
{{- range $name, $v := (.Values.vendors | default dict) }}
{{- if and $v $v.existingSecret }}
{{- $refs = append $refs (printf "%s:%s:%s" $name $v.existingSecret ($v.key | default "")) }}
{{- end }}
{{- end }}
{{- with $refs }}
checksum/vendor-secrets: {{ toJson . | sha256sum }}
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
{{- else if eq .Values.redis.mode "cluster" }}
{{- if or .Values.redis.url $inSecret }}
{{- fail "redis.mode=cluster: hookbridge takes exactly one of HOOKBRIDGE_REDIS_URL, _SENTINELS and _CLUSTER_NODES; leave redis.url, secret.redisUrl and existingSecret.keys.redisUrl empty" }}
{{- end }}
{{- if empty .Values.redis.cluster.nodes }}
{{- fail "redis.mode=cluster needs redis.cluster.nodes" }}
{{- end }}
{{- end }}
{{- if and .Values.worker.split .Values.config.WORKER_ROLE }}
{{- fail "worker.split sets each worker Deployment's HOOKBRIDGE_WORKER_ROLE: leave config.WORKER_ROLE unset" }}
{{- end }}
{{- include "hookbridge.validateShutdown" . }}
{{- include "hookbridge.validateKeda" . }}
{{- include "hookbridge.validatePdbs" . }}
{{- include "hookbridge.validateRedisAuth" . }}
{{- include "hookbridge.validateVendors" . }}
{{- end }}

{{/*
Shutdown margins: Kubernetes sends SIGTERM after the preStop hook and SIGKILL at
terminationGracePeriodSeconds, counted from the start of preStop. The process needs its own grace
after preStop, plus a margin for the interpreter's exit, inside that period. Checked for both roles.
*/}}
{{- define "hookbridge.shutdownMarginSeconds" -}}5{{- end }}

{{- define "hookbridge.validateShutdown" -}}
{{- $margin := int (include "hookbridge.shutdownMarginSeconds" .) }}
{{- range $role := list "api" "worker" }}
{{- $v := get $.Values $role }}
{{- $preStop := int (default 0 $v.preStopSleepSeconds) }}
{{- $need := add $preStop (int $v.shutdownGraceSeconds) $margin }}
{{- if lt (int $v.terminationGracePeriodSeconds) (int $need) }}
{{- fail (printf "%s.terminationGracePeriodSeconds (%d) must be at least %s.preStopSleepSeconds (%d) + %s.shutdownGraceSeconds (%d) + a %ds margin = %d, or Kubernetes kills the %s mid-shutdown" $role (int $v.terminationGracePeriodSeconds) $role $preStop $role (int $v.shutdownGraceSeconds) $margin (int $need) $role) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
KEDA: only worker pods export hookbridge_ready_jobs, so at zero replicas the metric is gone and the
worker could never scale up again. The labels `service` and `endpoint` exist only on series scraped
through a ServiceMonitor: a query that filters on them reads nothing (KEDA takes it as 0) without one.
*/}}
{{- define "hookbridge.kedaQuery" -}}
{{- $ctx := .ctx | default . }}
{{- $role := .role | default "" }}
{{- $queue := "" }}
{{- if eq $role "runs" }}{{ $queue = ", queue!=\"deliveries\"" }}{{ end }}
{{- if eq $role "deliveries" }}{{ $queue = ", queue=\"deliveries\"" }}{{ end }}
{{- with $ctx }}
{{- if .Values.keda.prometheus.query }}
{{- tpl .Values.keda.prometheus.query . }}
{{- else if .Values.serviceMonitor.enabled }}
{{- printf "sum(max by (queue) (hookbridge_ready_jobs{namespace=%q, service=%q%s}))" .Release.Namespace (include "hookbridge.workerMetricsName" .) $queue }}
{{- else }}
{{- printf "sum(max by (queue) (hookbridge_ready_jobs{namespace=%q, pod=~%q%s}))" .Release.Namespace (printf "%s-worker-.*" (include "hookbridge.fullname" .)) $queue }}
{{- end }}
{{- end }}
{{- end }}

{{/* The worker Deployments' roles: [""] (one Deployment, both loops) or, with worker.split, both. */}}
{{- define "hookbridge.workerRoles" -}}
{{- if .Values.worker.split }}["runs","deliveries"]{{ else }}[""]{{ end }}
{{- end }}

{{/* A worker Deployment's name; (dict "ctx" $ "role" "runs"), role "" for the unsplit one. */}}
{{- define "hookbridge.workerName" -}}
{{- include "hookbridge.fullname" .ctx }}-worker{{ if .role }}-{{ .role }}{{ end }}
{{- end }}

{{- define "hookbridge.validateKeda" -}}
{{- if .Values.keda.enabled }}
{{- if not .Values.keda.prometheus.serverAddress }}
{{- fail "keda.enabled needs keda.prometheus.serverAddress" }}
{{- end }}
{{- if lt (int .Values.keda.minReplicaCount) 1 }}
{{- fail "keda.minReplicaCount must be 1 or more: only worker pods export hookbridge_ready_jobs, so at 0 replicas the backlog is never seen and the worker never scales up" }}
{{- end }}
{{- if and (not .Values.serviceMonitor.enabled) (regexMatch "(^|[{,\\s])(service|endpoint)\\s*(=|!=|=~|!~)" (include "hookbridge.kedaQuery" .)) }}
{{- fail "keda.prometheus.query filters on the label `service` or `endpoint`, which only a ServiceMonitor scrape adds: with serviceMonitor.enabled=false the query reads nothing and the worker never scales. Enable serviceMonitor or filter on namespace/pod" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The fewest pods a role runs: its HPA's or KEDA's minimum, else its replica count. */}}
{{- define "hookbridge.minReplicas" -}}
{{- if eq .role "api" }}
{{- ternary .ctx.Values.api.autoscaling.minReplicas .ctx.Values.api.replicas .ctx.Values.api.autoscaling.enabled }}
{{- else }}
{{- ternary .ctx.Values.keda.minReplicaCount .ctx.Values.worker.replicas .ctx.Values.keda.enabled }}
{{- end }}
{{- end }}

{{/* A PDB whose minAvailable reaches the replica count never lets a node drain. */}}
{{- define "hookbridge.validatePdbs" -}}
{{- range $role := list "api" "worker" }}
{{- $pdb := (get $.Values $role).pdb }}
{{- if and $pdb.enabled (not (kindIs "invalid" $pdb.minAvailable)) }}
{{- $replicas := int (include "hookbridge.minReplicas" (dict "ctx" $ "role" $role)) }}
{{- $min := $pdb.minAvailable }}
{{- if kindIs "string" $min }}
{{- if ge (int (trimSuffix "%" $min)) 100 }}
{{- fail (printf "%s.pdb.minAvailable %s blocks every eviction: drains never finish" $role $min) }}
{{- end }}
{{- else if ge (int $min) $replicas }}
{{- fail (printf "%s.pdb.minAvailable (%d) must be below the role's replica count (%d), or no pod can ever be evicted and node drains hang" $role (int $min) $replicas) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Redis credentials and TLS. */}}
{{- define "hookbridge.secretHas" -}}
{{- if .ctx.Values.existingSecret.name }}
{{- if get .ctx.Values.existingSecret.keys .field }}true{{ end }}
{{- else if get .ctx.Values.secret .field }}true{{ end }}
{{- end }}

{{- define "hookbridge.validateRedisAuth" -}}
{{- $sentinelMode := and (not .Values.redis.embedded.enabled) (eq .Values.redis.mode "sentinel") }}
{{- if and (not $sentinelMode) (or .Values.redis.sentinel.tls .Values.redis.sentinel.username (include "hookbridge.secretHas" (dict "ctx" . "field" "redisSentinelPassword"))) }}
{{- fail "Sentinel credentials or TLS (redis.sentinel.username, redis.sentinel.tls, the Sentinel password) are set, but redis.mode is not sentinel" }}
{{- end }}
{{- $clusterMode := and (not .Values.redis.embedded.enabled) (eq .Values.redis.mode "cluster") }}
{{- if and .Values.redis.tls.enabled (not (or $sentinelMode $clusterMode)) }}
{{- fail "redis.tls.enabled is for the master found through Sentinel or a cluster's nodes; with redis.mode=url say TLS with a rediss:// URL (redis.tls.caSecret and redis.tls.verify still apply)" }}
{{- end }}
{{- if and .Values.redis.embedded.enabled (or .Values.redis.auth.username (include "hookbridge.secretHas" (dict "ctx" . "field" "redisPassword"))) }}
{{- fail "the embedded Redis has no password: leave redis.auth.username and the Redis password empty with redis.embedded.enabled" }}
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

{{/*
The size of /tmp. Starlette spools a multipart file over 1 MiB to /tmp while the api reads the request,
so the volume must hold MAX_DOCUMENT_BYTES for each upload in flight (api.uploadsInFlight), plus 16 MiB
for everything else; "" computes that from the settings, a quantity overrides it.
*/}}
{{- define "hookbridge.tmpSize" -}}
{{- if .Values.tmpVolume.sizeLimit }}
{{- .Values.tmpVolume.sizeLimit }}
{{- else }}
{{- $doc := int64 (default 52428800 .Values.config.MAX_DOCUMENT_BYTES) }}
{{- $bytes := add (mul $doc (int64 .Values.api.uploadsInFlight)) 16777216 }}
{{- printf "%dMi" (div (add $bytes 1048575) 1048576) }}
{{- end }}
{{- end }}

{{/* Volumes for the Redis CA certificate (redis.tls.caSecret). */}}
{{- define "hookbridge.redisCaPath" -}}/etc/hookbridge/redis-ca/ca.crt{{- end }}

{{- define "hookbridge.redisCaVolume" -}}
{{- with .Values.redis.tls.caSecret.name }}
- name: redis-ca
  secret:
    secretName: {{ . }}
    items:
      - key: {{ $.Values.redis.tls.caSecret.key }}
        path: ca.crt
{{- end }}
{{- end }}

{{/* The Secret as files (secretsAsFiles): the settings name them with HOOKBRIDGE_<X>_FILE. */}}
{{- define "hookbridge.secretFilesVolume" -}}
{{- if .Values.secretsAsFiles }}
- name: secrets
  secret:
    secretName: {{ include "hookbridge.secretName" . }}
{{- include "hookbridge.vendorSecretVolumes" . }}
{{- end }}
{{- end }}

{{- define "hookbridge.secretFilesMount" -}}
{{- if .Values.secretsAsFiles }}
- name: secrets
  mountPath: /etc/hookbridge/secrets
  readOnly: true
{{- include "hookbridge.vendorSecretMounts" . }}
{{- end }}
{{- end }}

{{- define "hookbridge.redisCaMount" -}}
{{- if .Values.redis.tls.caSecret.name }}
- name: redis-ca
  mountPath: /etc/hookbridge/redis-ca
  readOnly: true
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

{{/* prometheus.io/* pod annotations, for a Prometheus that discovers pods without a ServiceMonitor. */}}
{{- define "hookbridge.scrapeAnnotations" -}}
{{- if and (not .ctx.Values.serviceMonitor.enabled) .ctx.Values.serviceMonitor.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | toString | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end }}
