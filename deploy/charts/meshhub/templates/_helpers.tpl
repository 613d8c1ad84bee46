{{- define "meshhub.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "meshhub.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "meshhub.labels" -}}
app.kubernetes.io/name: {{ include "meshhub.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "meshhub.selectorLabels" -}}
app.kubernetes.io/name: {{ include "meshhub.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "meshhub.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "meshhub.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "meshhub.tlsSecret" -}}
{{- if .Values.tls.existingSecret -}}
{{- .Values.tls.existingSecret -}}
{{- else if .Values.tls.cert -}}
{{- printf "%s-tls" (include "meshhub.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The hub's configuration file: the user's config plus the blocks the chart owns. */}}
{{- define "meshhub.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- if .Values.leaderElection.enabled -}}
{{- $_ := set $config "leaderElection" (dict "enabled" true "namespace" .Release.Namespace "leaseName" .Values.leaderElection.leaseName "leaseDuration" .Values.leaderElection.leaseDuration "renewDeadline" .Values.leaderElection.renewDeadline "retryPeriod" .Values.leaderElection.retryPeriod "shards" (int (.Values.leaderElection.shards | default 0))) -}}
{{- end -}}
{{- if .Values.webhook.enabled -}}
{{- $_ := set $config "webhook" (dict "addr" (printf "0.0.0.0:%d" (int .Values.webhook.port)) "tls" (dict "cert" "/etc/meshhub/webhook/tls.crt" "key" "/etc/meshhub/webhook/tls.key")) -}}
{{- end -}}
{{- if .Values.grpc.tls.existingSecret -}}
{{- $tls := dict "cert" "/etc/meshhub/grpc-tls/tls.crt" "key" "/etc/meshhub/grpc-tls/tls.key" -}}
{{- if .Values.grpc.tls.mutual -}}
{{- $_ := set $tls "clientCa" "/etc/meshhub/grpc-tls/ca.crt" -}}
{{- end -}}
{{- $_ := set $config "grpcTls" $tls -}}
{{- end -}}
{{- if .Values.history.enabled -}}
{{- if and .Values.history.persistence.existingClaim (gt (int .Values.replicaCount) 1) -}}
{{- fail "history.persistence.existingClaim needs replicaCount 1: each replica locks its own history database (leave it empty for a per-pod emptyDir)" -}}
{{- end -}}
{{- $_ := set $config "history" (dict "dir" "/var/lib/meshhub" "keep" (int .Values.history.keep) "cacheBytes" (int64 .Values.history.cacheBytes)) -}}
{{- end -}}
{{- if .Values.audit.enabled -}}
{{- if not (or .Values.audit.stdout .Values.audit.file) -}}
{{- fail "audit.enabled needs audit.stdout or audit.file" -}}
{{- end -}}
{{- $audit := dict "stdout" .Values.audit.stdout "maxBytes" (int64 .Values.audit.maxBytes) "keep" (int .Values.audit.keep) -}}
{{- if .Values.audit.file -}}
{{- $_ := set $audit "file" "/var/log/meshhub/audit.log" -}}
{{- end -}}
{{- $_ := set $config "audit" $audit -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/* "true" when a Kubernetes source of the configuration writes status back (statusWriteBack.enabled). */}}
{{- define "meshhub.statusWriteBack" -}}
{{- range .Values.config.sources -}}
{{- if and .kubernetes .kubernetes.statusWriteBack .kubernetes.statusWriteBack.enabled -}}true{{- end -}}
{{- end -}}
{{- end -}}
