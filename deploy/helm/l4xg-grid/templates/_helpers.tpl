{{- define "grid.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "grid.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "grid.labels" -}}
app.kubernetes.io/name: {{ include "grid.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "grid.selectorLabels" -}}
app.kubernetes.io/name: {{ include "grid.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The headless Service: stable DNS names pod.<headless>.<ns>.svc. */}}
{{- define "grid.headless" -}}
{{- printf "%s-peers" (include "grid.fullname" .) -}}
{{- end -}}

{{/*
The scale guard: on an upgrade (the StatefulSet exists), refuse to lower
replicaCount unless scaleDownDrained says the leaving pods were drained,
and refuse to change it while bootstrapExpect follows it. helm template
has no cluster to look up, so it renders without the guard.
*/}}
{{- define "grid.scaleGuard" -}}
{{- $sts := lookup "apps/v1" "StatefulSet" .Release.Namespace (include "grid.fullname" .) -}}
{{- if $sts -}}
{{- $current := int $sts.spec.replicas -}}
{{- $next := int .Values.replicaCount -}}
{{- if and (lt $next $current) (not .Values.scaleDownDrained) -}}
{{- fail (printf "replicaCount %d < %d: drain the pods that go away first (gridnode drain --node <pod> --wait, from the highest ordinal down), then set scaleDownDrained=true; a scale-down without a drain is how a cluster loses quorum" $next $current) -}}
{{- end -}}
{{- if and (ne $next $current) (not .Values.bootstrapExpect) -}}
{{- fail (printf "replicaCount changes from %d to %d: set bootstrapExpect to the number of nodes the cluster was created with" $current $next) -}}
{{- end -}}
{{- end -}}
{{- end -}}
