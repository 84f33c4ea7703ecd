{{/* The chart's name, at most 63 characters. */}}
{{- define "bootops.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's objects' name prefix: the release name, with the chart's name when it does not already hold it. Trimmed to 52 so that suffixes (-hub-headless) stay within 63. */}}
{{- define "bootops.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "bootops.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "bootops.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component (serve or hub): pass (list $ "serve"). */}}
{{- define "bootops.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "bootops.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "bootops.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* The Secret that holds the chart-made secrets of serve. */}}
{{- define "bootops.secretName" -}}
{{ include "bootops.fullname" . }}-secrets
{{- end }}

{{/* Whether serve has any Git secret file: true or "". */}}
{{- define "bootops.gitSecret" -}}
{{- $g := .Values.git -}}
{{- if $g.existingSecret -}}
{{- if or $g.existingSecretKeys.password $g.existingSecretKeys.sshKey $g.existingSecretKeys.knownHosts }}true{{ end -}}
{{- else if or $g.password $g.sshKey $g.knownHosts }}true{{ end -}}
{{- end }}

{{/* Whether serve has BMC secrets: true or "". */}}
{{- define "bootops.bmcSecret" -}}
{{- if or .Values.bmc.existingSecret .Values.bmc.credentials }}true{{ end -}}
{{- end }}

{{/* serve's settings file: the user's config and the chart's own settings. */}}
{{- define "bootops.serveConfig" -}}
{{- $v := .Values -}}
{{- $cfg := deepCopy $v.serve.config -}}
{{- $_ := set $cfg "state-dir" "/var/lib/bootops" -}}
{{- $_ := set $cfg "http-addr" (printf ":%d" (int $v.serve.httpPort)) -}}
{{- if $v.serve.httpsPort }}{{ $_ := set $cfg "https-addr" (printf ":%d" (int $v.serve.httpsPort)) }}{{ end -}}
{{- $_ := set $cfg "tftp-addr" (ternary ":69" "" $v.serve.tftp) -}}
{{- if $v.serve.verifyCommitsKeys }}{{ $_ := set $cfg "verify-commits" "/etc/bootops/config/verify-commits.asc" }}{{ end -}}
{{- $g := $v.git -}}
{{- if $g.username }}{{ $_ := set $cfg "git-username" $g.username }}{{ end -}}
{{- if $g.existingSecret -}}
{{- if $g.existingSecretKeys.password }}{{ $_ := set $cfg "git-password-file" "/etc/bootops/git/password" }}{{ end -}}
{{- if $g.existingSecretKeys.sshKey }}{{ $_ := set $cfg "git-ssh-key" "/etc/bootops/git/ssh-key" }}{{ end -}}
{{- if $g.existingSecretKeys.knownHosts }}{{ $_ := set $cfg "git-known-hosts" "/etc/bootops/git/known-hosts" }}{{ end -}}
{{- else -}}
{{- if $g.password }}{{ $_ := set $cfg "git-password-file" "/etc/bootops/git/password" }}{{ end -}}
{{- if $g.sshKey }}{{ $_ := set $cfg "git-ssh-key" "/etc/bootops/git/ssh-key" }}{{ end -}}
{{- if $g.knownHosts }}{{ $_ := set $cfg "git-known-hosts" "/etc/bootops/git/known-hosts" }}{{ end -}}
{{- end -}}
{{- if or $v.webhook.secret $v.webhook.existingSecret }}{{ $_ := set $cfg "webhook-secret-file" "/etc/bootops/webhook/secret" }}{{ end -}}
{{- if or $v.ui.token $v.ui.existingSecret }}{{ $_ := set $cfg "ui-token-file" "/etc/bootops/ui/token" }}{{ end -}}
{{- if include "bootops.bmcSecret" . }}{{ $_ := set $cfg "secrets-dir" "/etc/bootops/bmc" }}{{ end -}}
{{- toYaml $cfg }}
{{- end }}
