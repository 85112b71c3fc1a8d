{{/* The release's name for its objects, at most 63 characters. */}}
{{- define "stepd.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "stepd.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "stepd.labels" -}}
{{ include "stepd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "stepd.serviceAccountName" -}}
{{- default (include "stepd.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "stepd.tokensSecret" -}}
{{- default (printf "%s-tokens" (include "stepd.fullname" .)) .Values.auth.tokens.existingSecret -}}
{{- end -}}

{{- define "stepd.tlsSecret" -}}
{{- default (printf "%s-tls" (include "stepd.fullname" .)) .Values.tls.secretName -}}
{{- end -}}

{{/* Fails on a mode the chart does not know. */}}
{{- define "stepd.mode" -}}
{{- if not (has .Values.mode (list "tls" "mesh")) -}}
{{- fail (printf "mode must be tls or mesh, not %q" .Values.mode) -}}
{{- end -}}
{{- .Values.mode -}}
{{- end -}}

{{- define "stepd.appProtocol" -}}
{{- if .Values.service.appProtocol -}}
{{- .Values.service.appProtocol -}}
{{- else if eq (include "stepd.mode" .) "mesh" -}}
grpc
{{- else -}}
tls
{{- end -}}
{{- end -}}

{{/* Checks the values of the PostgreSQL replica mode and the drain. */}}
{{- define "stepd.checkCluster" -}}
{{- if le (int .Values.terminationGracePeriodSeconds) (add (int .Values.drainTimeoutSeconds) 9 | int) -}}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be at least drainTimeoutSeconds + 10 (%v)" .Values.terminationGracePeriodSeconds (add (int .Values.drainTimeoutSeconds) 10)) -}}
{{- end -}}
{{- if .Values.cluster.enabled -}}
{{- if lt (int .Values.cluster.replicas) 2 -}}
{{- fail "cluster.replicas must be at least 2 (one replica needs no PostgreSQL)" -}}
{{- end -}}
{{- if not .Values.cluster.database.existingSecret -}}
{{- fail "cluster.database.existingSecret must name the Secret with the postgres:// URL" -}}
{{- end -}}
{{- if not .Values.cluster.peerToken.existingSecret -}}
{{- fail "cluster.peerToken.existingSecret must name the Secret with the peer token" -}}
{{- end -}}
{{- if .Values.persistence.enabled -}}
{{- fail "persistence is for one daemon's SQLite database; replicas keep their state in PostgreSQL" -}}
{{- end -}}
{{- end -}}
{{- end -}}
