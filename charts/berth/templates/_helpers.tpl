{{/* Names and labels. */}}
{{- define "berth.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "berth.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "berth.api.fullname" -}}
{{- printf "%s-api" (include "berth.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "berth.operator.fullname" -}}
{{- printf "%s-operator" (include "berth.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "berth.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "berth.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: berth
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component ("api" or "operator"); call with (dict "ctx" $ "component" "api"). */}}
{{- define "berth.selectorLabels" -}}
app.kubernetes.io/name: {{ include "berth.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "berth.componentLabels" -}}
{{ include "berth.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "berth.endpointsNamespace" -}}
{{- default .Release.Namespace .Values.endpointsNamespace -}}
{{- end -}}

{{- define "berth.api.serviceAccountName" -}}
{{- if .Values.api.serviceAccount.create -}}
{{- default (include "berth.api.fullname" .) .Values.api.serviceAccount.name -}}
{{- else -}}
{{- required "api.serviceAccount.name is required when api.serviceAccount.create is false" .Values.api.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "berth.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create -}}
{{- default (include "berth.operator.fullname" .) .Values.operator.serviceAccount.name -}}
{{- else -}}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "berth.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{- define "berth.secretName" -}}
{{- include "berth.fullname" . -}}
{{- end -}}

{{- define "berth.configName" -}}
{{- printf "%s-config" (include "berth.fullname" .) -}}
{{- end -}}

{{/*
Cross-field rules JSON Schema cannot phrase clearly. Every template includes this, so
`helm install`, `helm template` and `helm lint` all stop with the same message.
*/}}
{{- define "berth.validate" -}}
{{- $external := or .Values.database.url .Values.database.existingSecret.name -}}
{{- if and (not $external) (not .Values.database.bundled.enabled) -}}
{{- fail "\n\nberth: a PostgreSQL URL is required. Set database.url=postgresql://user:pass@host:5432/berth, or database.existingSecret.name=<secret> (key database.existingSecret.key, default \"database-url\"). For a try-out only (not for production), database.bundled.enabled=true runs a single PostgreSQL pod in the release." -}}
{{- end -}}
{{- if and $external .Values.database.bundled.enabled -}}
{{- fail "\n\nberth: database.bundled.enabled=true and an external database (database.url or database.existingSecret.name) are both set; choose one. To use your own database with values-cpu-only.yaml, add --set database.bundled.enabled=false." -}}
{{- end -}}
{{- end -}}

{{/* The bundled PostgreSQL (database.bundled): StatefulSet, Service and password Secret share this name. */}}
{{- define "berth.postgresql.fullname" -}}
{{- printf "%s-postgresql" (include "berth.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* DATABASE_URL of the bundled PostgreSQL, with $(BERTH_BUNDLED_DB_PASSWORD) expanded by the kubelet. */}}
{{- define "berth.postgresql.url" -}}
{{- $db := .Values.database.bundled -}}
{{- printf "postgresql://%s:$(BERTH_BUNDLED_DB_PASSWORD)@%s.%s.svc:5432/%s" $db.username (include "berth.postgresql.fullname" .) .Release.Namespace $db.database -}}
{{- end -}}

{{/* Env entry whose value comes from a Secret: (dict "name" ENV "ref" .Values.x.existingSecret "key" KEY "ctx" $). */}}
{{- define "berth.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
{{- if .ref.name }}
      name: {{ .ref.name }}
      key: {{ .ref.key }}
{{- else }}
      name: {{ include "berth.secretName" .ctx }}
      key: {{ .key }}
{{- end }}
{{- end -}}

{{/*
An existing value of one of the chart's Secrets (so generated secrets survive upgrades), or "":
(dict "ctx" $ "key" KEY), optionally "secret" NAME (default: the chart's main Secret).
*/}}
{{- define "berth.existingSecretValue" -}}
{{- $s := lookup "v1" "Secret" .ctx.Release.Namespace (.secret | default (include "berth.secretName" .ctx)) -}}
{{- if and $s $s.data (hasKey $s.data .key) -}}
{{- index $s.data .key | b64dec -}}
{{- end -}}
{{- end -}}

{{- define "berth.podSecurity" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}
