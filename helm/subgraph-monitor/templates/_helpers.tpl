{{/* Names, labels and the pieces every template shares. */}}

{{- define "sgm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name; 52 characters leave room for StatefulSet pod and PVC suffixes. */}}
{{- define "sgm.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sgm.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sgm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sgm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sgm.labels" -}}
helm.sh/chart: {{ include "sgm.chart" . }}
{{ include "sgm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: worker
app.kubernetes.io/part-of: subgraph-monitor
{{- end -}}

{{- define "sgm.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sgm.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "sgm.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Where the pod finds its files. */}}
{{- define "sgm.stateMount" -}}/var/lib/subgraph-monitor{{- end -}}
{{- define "sgm.configMount" -}}/etc/subgraph-monitor{{- end -}}
{{- define "sgm.queriesMount" -}}/etc/subgraph-monitor/queries{{- end -}}
{{- define "sgm.secretsMount" -}}/etc/subgraph-monitor/kafka{{- end -}}
{{- define "sgm.registrySecretsMount" -}}/etc/subgraph-monitor/schema-registry{{- end -}}

{{/* The queries setting: a file of the mounted ConfigMap, or a built-in name. */}}
{{- define "sgm.queries" -}}
{{- if or .Values.queries.existingConfigMap .Values.queries.inline -}}
{{- printf "%s/%s" (include "sgm.queriesMount" .) .Values.queries.key -}}
{{- else -}}
{{- required "queries: set builtin, inline or existingConfigMap" .Values.queries.builtin -}}
{{- end -}}
{{- end -}}

{{- define "sgm.queriesConfigMap" -}}
{{- default (printf "%s-queries" (include "sgm.fullname" .)) .Values.queries.existingConfigMap -}}
{{- end -}}

{{/* The settings file: every non-null value of .Values.config plus what the chart decides. */}}
{{- define "sgm.configFile" -}}
{{- $config := dict -}}
{{- range $key, $value := .Values.config -}}
{{- if not (kindIs "invalid" $value) -}}
{{- $_ := set $config $key $value -}}
{{- end -}}
{{- end -}}
{{- /* The retention map goes in as SGM_RETENTION's string, relation=duration,...: the
service parses durations from that string, not from a map's values. */ -}}
{{- $retention := .Values.config.retention -}}
{{- if $retention -}}
{{- $pairs := list -}}
{{- range $relation, $duration := $retention -}}
{{- $pairs = append $pairs (printf "%s=%s" $relation $duration) -}}
{{- end -}}
{{- $_ := set $config "retention" (join "," $pairs) -}}
{{- end -}}
{{- $group := default "subgraph-monitor" .Values.config.group_id -}}
{{- if eq (include "sgm.engine" .) "distributed" -}}
{{- /* The driver joins the chart's RayCluster as a Ray node of its own (no CPUs), at the
head's GCS port; the shards replace the replicated scale-out, so there is no control topic. */ -}}
{{- $_ := set $config "ray_address" (default (printf "%s-head-svc.%s.svc:6379" (include "sgm.rayCluster" .) .Release.Namespace) .Values.config.ray_address) -}}
{{- if not .Values.config.ray_address -}}
{{- $_ := set $config "ray_join" true -}}
{{- end -}}
{{- if kindIs "invalid" .Values.config.ray_object_store_memory -}}
{{- $_ := set $config "ray_object_store_memory" (mul (int .Values.ray.driver.objectStoreMiB) 1048576) -}}
{{- end -}}
{{- $_ := unset $config "control_topic" -}}
{{- else -}}
{{- $_ := set $config "control_topic" (default (printf "%s-control" $group) .Values.config.control_topic) -}}
{{- end -}}
{{- $_ := set $config "state_dir" (printf "%s/state" (include "sgm.stateMount" .)) -}}
{{- $_ := set $config "http_port" (int .Values.http.port) -}}
{{- $_ := set $config "queries" (include "sgm.queries" .) -}}
{{- if .Values.kafka.existingSecret -}}
{{- $_ := set $config "kafka_secrets_dir" (include "sgm.secretsMount" .) -}}
{{- end -}}
{{- if .Values.schemaRegistry.existingSecret -}}
{{- $_ := set $config "schema_registry_secrets_dir" (include "sgm.registrySecretsMount" .) -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/* The engine: embedded or distributed. */}}
{{- define "sgm.engine" -}}
{{- default "embedded" .Values.config.engine -}}
{{- end -}}

{{/* The RayCluster's name (KubeRay names its head Service NAME-head-svc). */}}
{{- define "sgm.rayCluster" -}}
{{- printf "%s-ray" (include "sgm.fullname" .) | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* PromQL label matchers of this release's series, for the alert rules. */}}
{{- define "sgm.ruleSelector" -}}
{{- default (printf "namespace=%q, job=%q" .Release.Namespace (include "sgm.fullname" .)) .Values.prometheusRule.selector -}}
{{- end -}}
