{{/* Chart name, truncated to the 63 characters a DNS label allows. */}}
{{- define "wavegate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: release-chart unless the release already says it. */}}
{{- define "wavegate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "wavegate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "wavegate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "wavegate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "wavegate.labels" -}}
helm.sh/chart: {{ include "wavegate.chart" . }}
{{ include "wavegate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "wavegate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "wavegate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The database mode, checked: sqlite or postgres. */}}
{{- define "wavegate.databaseMode" -}}
{{- $mode := .Values.database.mode | default "sqlite" }}
{{- if not (has $mode (list "sqlite" "postgres")) }}
{{- fail (printf "database.mode is %q: use sqlite (one replica, a PersistentVolumeClaim) or postgres (several replicas)" $mode) }}
{{- end }}
{{- $mode }}
{{- end }}

{{/* Replicas: always 1 on SQLite (one process per database file). */}}
{{- define "wavegate.replicas" -}}
{{- if eq (include "wavegate.databaseMode" .) "sqlite" }}1{{ else }}{{ int .Values.replicaCount }}{{ end }}
{{- end }}

{{- define "wavegate.pvcName" -}}
{{- .Values.database.sqlite.persistence.existingClaim | default (printf "%s-data" (include "wavegate.fullname" .)) }}
{{- end }}

{{- define "wavegate.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* The sandbox mode, checked: bwrap or none. Also the network mode, the
paths, the cgroups setting, the execution profiles' settings and, with
bwrap, the cluster's version. */}}
{{- define "wavegate.sandboxMode" -}}
{{- $s := .Values.sandbox }}
{{- $mode := $s.mode | default "bwrap" }}
{{- if not (has $mode (list "bwrap" "none")) }}
{{- fail (printf "sandbox.mode is %q: use bwrap (every command in a bubblewrap sandbox) or none (no sandbox; commands see the bot's files and secrets)" $mode) }}
{{- end }}
{{- if not (has ($s.network | default "none") (list "none" "egress" "host")) }}
{{- fail (printf "sandbox.network is %q: use none (loopback only), egress (outbound through pasta) or host (the pod's network)" $s.network) }}
{{- end }}
{{- range $key := list "read" "applyWrite" }}
{{- range $path := (get $s $key | default list) }}
{{- if or (not (hasPrefix "/" (toString $path))) (contains ":" (toString $path)) }}
{{- fail (printf "sandbox.%s: %q must be an absolute path without ':'" $key (toString $path)) }}
{{- end }}
{{- end }}
{{- end }}
{{- if not (has ($s.cgroups | default "auto") (list "auto" "off")) }}
{{- fail (printf "sandbox.cgroups is %q: use auto (cgroups hold the execution profiles' memory and process limits where the pod may make them, else rlimits) or off (rlimits only)" $s.cgroups) }}
{{- end }}
{{- if include "wavegate.profilesDefineDefault" . }}
{{- if or $s.read $s.applyWrite (ne ($s.network | default "none") "none") }}
{{- fail "profiles defines [profile.default], and sandbox.read, sandbox.applyWrite or sandbox.network say what the default profile shows too (WAVEGATE_SANDBOX_READ, _APPLY_WRITE, _NETWORK): keep one; move them into [profile.default]" }}
{{- end }}
{{- end }}
{{- range $name := .Values.profileSecrets | default list }}
{{- if not (regexMatch `^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$` (toString $name)) }}
{{- fail (printf "profileSecrets: %q is not a Secret's name; list the names of existing Secrets in the release's namespace, each mounted at /etc/wavegate/secrets/<name>" (toString $name)) }}
{{- end }}
{{- end }}
{{- if and (eq $mode "bwrap") (semverCompare "<1.30.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail (printf "sandbox.mode bwrap needs Kubernetes >= 1.30 (hostUsers: false, procMount: Unmasked, appArmorProfile; on by default from 1.33), this cluster is %s: upgrade, or set sandbox.mode=none" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- $mode }}
{{- end }}

{{/* Where the App's private key is mounted, as a file. */}}
{{- define "wavegate.githubKeyDir" -}}
/run/secrets/wavegate/github
{{- end }}

{{/* Where the ledger key is mounted, as a file. */}}
{{- define "wavegate.ledgerKeyDir" -}}
/run/secrets/wavegate/ledger
{{- end }}

{{/* The Secret holding the ledger key: required in postgres mode (every
replica signs with the same key, and the data dir is an emptyDir); "" in
sqlite mode lets the bot generate one on the volume. */}}
{{- define "wavegate.ledgerKeySecret" -}}
{{- if eq (include "wavegate.databaseMode" .) "sqlite" -}}
{{- .Values.ledger.keySecret.name -}}
{{- else -}}
{{- required "ledger.keySecret.name: name the Secret holding the ledger key (database.mode is postgres: every replica must sign with the same key, and the data dir does not outlive a pod); create it with `openssl genpkey -algorithm ed25519 -out ledger-key.pem` and `kubectl create secret generic wavegate-ledger --from-file=ledger-key.pem`" .Values.ledger.keySecret.name -}}
{{- end -}}
{{- end }}

{{/* "true" when the profiles file (the `profiles` value) defines
[profile.default]: the sandbox.read/applyWrite/network settings must then
stay unset, since the server refuses both at start. */}}
{{- define "wavegate.profilesDefineDefault" -}}
{{- if regexMatch `(?m)^[ \t]*\[[ \t]*profile\.("default"|'default'|default)[ \t]*\]` (toString (.Values.profiles | default "")) }}true{{ end }}
{{- end }}

{{/* Where the execution profiles file is mounted, and the profiles' credential Secrets under it. */}}
{{- define "wavegate.profilesFile" -}}
/etc/wavegate/profiles.toml
{{- end }}
{{- define "wavegate.reposConfigFile" -}}
/etc/wavegate/repos.toml
{{- end }}
{{- define "wavegate.profileSecretsDir" -}}
/etc/wavegate/secrets
{{- end }}
