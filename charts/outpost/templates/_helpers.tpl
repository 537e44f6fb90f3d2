{{/*
The chart's name, or nameOverride.
*/}}
{{- define "outpost.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: fullnameOverride, else RELEASE-outpost (or RELEASE
when the release name already contains the chart's name). Kept to 50 characters so
that suffixes (-controllers, -etcd-headless) stay within 63.
*/}}
{{- define "outpost.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "outpost.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object. Pass a dict with the root context as "ctx" and the component
(apiserver, controllers, etcd) as "component".
*/}}
{{- define "outpost.labels" -}}
helm.sh/chart: {{ include "outpost.chart" .ctx }}
{{ include "outpost.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: outpost
{{- end }}

{{/*
Selector labels of one component (same dict as outpost.labels).
*/}}
{{- define "outpost.selectorLabels" -}}
app.kubernetes.io/name: {{ include "outpost.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
The outpost image: by digest when one is given, else by tag (default: appVersion).
*/}}
{{- define "outpost.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Names of the API server's Service, the Secrets and the etcd objects.
*/}}
{{- define "outpost.apiserverName" -}}
{{- include "outpost.fullname" . }}
{{- end }}

{{- define "outpost.controllersName" -}}
{{- printf "%s-controllers" (include "outpost.fullname" .) }}
{{- end }}

{{- define "outpost.etcdName" -}}
{{- printf "%s-etcd" (include "outpost.fullname" .) }}
{{- end }}

{{- define "outpost.etcdHeadlessName" -}}
{{- printf "%s-etcd-headless" (include "outpost.fullname" .) }}
{{- end }}

{{- define "outpost.authSecretName" -}}
{{- default (printf "%s-auth" (include "outpost.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{- define "outpost.etcdTlsSecretName" -}}
{{- default (printf "%s-etcd-tls" (include "outpost.fullname" .)) .Values.etcd.tls.existingSecret }}
{{- end }}

{{/*
The scheme of etcd's client and peer URLs: https with etcd.tls.enabled.
*/}}
{{- define "outpost.etcdScheme" -}}
{{- if .Values.etcd.tls.enabled }}https{{ else }}http{{ end }}
{{- end }}

{{- define "outpost.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "outpost.fullname" .)) .Values.tls.existingSecret }}
{{- end }}

{{/*
The API server Service's DNS names, most qualified last.
*/}}
{{- define "outpost.apiserverDnsNames" -}}
{{- $svc := include "outpost.apiserverName" . }}
{{- $ns := .Release.Namespace }}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) | toJson }}
{{- end }}

{{/*
The API server's in-cluster URL (what the controllers dial).
*/}}
{{- define "outpost.apiserverUrl" -}}
{{- printf "https://%s.%s.svc:%d" (include "outpost.apiserverName" .) .Release.Namespace (int .Values.apiserver.service.port) }}
{{- end }}

{{/*
The address runners dial: controllers.publicUrl, else the in-cluster URL.
*/}}
{{- define "outpost.publicUrl" -}}
{{- default (include "outpost.apiserverUrl" .) .Values.controllers.publicUrl }}
{{- end }}

{{/*
The DNS name of bundled etcd member INDEX (pass a list: root context, index).
*/}}
{{- define "outpost.etcdMemberHost" -}}
{{- $ctx := index . 0 }}
{{- printf "%s-%d.%s.%s.svc.%s" (include "outpost.etcdName" $ctx) (int (index . 1)) (include "outpost.etcdHeadlessName" $ctx) $ctx.Release.Namespace $ctx.Values.clusterDomain }}
{{- end }}

{{/*
etcd's --initial-cluster for the bundled members: NAME-i=SCHEME://HOST-i:2380, one per replica.
*/}}
{{- define "outpost.etcdInitialCluster" -}}
{{- $members := list }}
{{- range $i := until (int .Values.etcd.bundled.replicas) }}
{{- $members = append $members (printf "%s-%d=%s://%s:2380" (include "outpost.etcdName" $) $i (include "outpost.etcdScheme" $) (include "outpost.etcdMemberHost" (list $ $i))) }}
{{- end }}
{{- join "," $members }}
{{- end }}

{{/*
The API server's --store: etcd://HOST:PORT,... of the bundled members or the external endpoints.
*/}}
{{- define "outpost.store" -}}
{{- $endpoints := list }}
{{- if eq .Values.etcd.mode "external" }}
{{- $endpoints = .Values.etcd.external.endpoints }}
{{- else }}
{{- range $i := until (int .Values.etcd.bundled.replicas) }}
{{- $endpoints = append $endpoints (printf "%s:2379" (include "outpost.etcdMemberHost" (list $ $i))) }}
{{- end }}
{{- end }}
{{- printf "etcd://%s" (join "," $endpoints) }}
{{- end }}
