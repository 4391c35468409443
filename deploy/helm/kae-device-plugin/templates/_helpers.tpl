{{/*
Names, labels and the daemon's config file. Kept here so every template derives them the same way.
*/}}

{{- define "kae.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kae.fullname" -}}
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

{{- define "kae.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kae.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kae.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kae.labels" -}}
helm.sh/chart: {{ include "kae.chart" . }}
{{ include "kae.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: device-plugin
app.kubernetes.io/part-of: kae
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "kae.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kae.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kae.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* Where the host's /dev is mounted (read-only) in the plugin container. */}}
{{- define "kae.hostDevMount" -}}/host/dev{{- end }}

{{/* The sysfs and dev roots the daemon reads: the node's, or a test cluster's fixture tree. */}}
{{- define "kae.sysfsRoot" -}}
{{- if .Values.devicePlugin.fixtureRoot }}{{ printf "%s/sys" .Values.devicePlugin.fixtureRoot }}{{ else }}/sys{{ end }}
{{- end }}

{{- define "kae.devRoot" -}}
{{- if .Values.devicePlugin.fixtureRoot }}{{ printf "%s/dev" .Values.devicePlugin.fixtureRoot }}{{ else }}{{ include "kae.hostDevMount" . }}{{ end }}
{{- end }}

{{- define "kae.configDir" -}}/etc/kae-deviceplugin{{- end }}

{{- define "kae.kubeletRoot" -}}
{{- .Values.kubeletRootDir | trimSuffix "/" }}
{{- end }}

{{/* True (non-empty) when the registration mode may use the kubelet's plugins_registry. */}}
{{- define "kae.usesPluginWatcher" -}}
{{- if or (include "kae.mayDra" .) (ne .Values.config.registration "kubelet-socket") }}true{{ end }}
{{- end }}

{{/*
The daemon's front end on a variant's nodes: its config.mode, or dra.enabled's choice when that is
empty. Called with a variant's context (.Values.config merged), as every per-variant template is.
*/}}
{{- define "kae.mode" -}}
{{- /* Any case and blanks, as the daemon reads it (the value checks took its spelling). */}}
{{- default (ternary "dra" "device-plugin" .Values.dra.enabled) (.Values.config.mode | toString | trim | lower) }}
{{- end }}

{{- define "kae.isDra" -}}
{{- if eq (include "kae.mode" .) "dra" }}true{{ end }}
{{- end }}

{{/*
mode auto: the daemon chooses DRA or the device plugin at start (docs/modes.md), so its pods get
what either needs, and the API access the choice takes (the token, NODE_NAME).
*/}}
{{- define "kae.isAuto" -}}
{{- if eq (include "kae.mode" .) "auto" }}true{{ end }}
{{- end }}

{{/* True (non-empty) when the pods may run the DRA driver: mode dra, or auto. */}}
{{- define "kae.mayDra" -}}
{{- if or (include "kae.isDra" .) (include "kae.isAuto" .) }}true{{ end }}
{{- end }}

{{/* The mode of every variant (default first), as a JSON list: merged as the DaemonSets are. */}}
{{- define "kae.variantModes" -}}
{{- $modes := list }}
{{- range $variant := include "kae.variants" . | fromJsonArray }}
{{- $values := $.Values }}
{{- if $variant }}
{{- $values = mergeOverwrite (deepCopy $.Values) (dict "config" (get $.Values.configs $variant)) }}
{{- end }}
{{- $modes = append $modes (include "kae.mode" (dict "Values" $values)) }}
{{- end }}
{{- toJson $modes }}
{{- end }}

{{/* True (non-empty) when a DaemonSet of the release runs in mode auto (its RBAC and policy). */}}
{{- define "kae.anyAuto" -}}
{{- if and .Values.devicePlugin.enabled (has "auto" (include "kae.variantModes" . | fromJsonArray)) }}true{{ end }}
{{- end }}

{{/*
True (non-empty) when any DaemonSet of the release runs in DRA mode, so the cluster-level DRA
objects (RBAC, admission policy, DeviceClasses) exist exactly when a driver needs them. Each
variant's values are merged as configmap.yaml and daemonset.yaml merge them (a configuration's
`mode: ""` also overrides, and then follows dra.enabled).
*/}}
{{- define "kae.anyDra" -}}
{{- if .Values.devicePlugin.enabled }}
{{- $modes := include "kae.variantModes" . | fromJsonArray }}
{{- /* mode auto may choose DRA only where the API serves resource.k8s.io/v1 (1.34+): below
       that, its nodes all run the device plugin and need none of DRA's cluster objects. */}}
{{- if or (has "dra" $modes) (and (has "auto" $modes) (semverCompare ">=1.34.0-0" .Capabilities.KubeVersion.Version)) }}true{{ end }}
{{- end }}
{{- end }}

{{/* True (non-empty) when any DaemonSet of the release runs in mode dra itself (not auto). */}}
{{- define "kae.anyExplicitDra" -}}
{{- if and .Values.devicePlugin.enabled (has "dra" (include "kae.variantModes" . | fromJsonArray)) }}true{{ end }}
{{- end }}

{{/* True (non-empty) when the daemon writes CDI specs: cdi.enabled, or DRA (one per claim). */}}
{{- define "kae.usesCdiDir" -}}
{{- if or .Values.cdi.enabled (include "kae.mayDra" .) }}true{{ end }}
{{- end }}

{{/* The DRA driver's own directory below the kubelet's plugins/: its socket and checkpoint. */}}
{{- define "kae.draPluginDir" -}}
{{- printf "%s/plugins/kae.openfuyao.com" (include "kae.kubeletRoot" .) }}
{{- end }}

{{/* The host directories holding the container runtime's config, which the daemon reads (DRA
mode, and cdi.enabled) to tell whether CDI devices are applied: config.dra.runtimeConfig's
directory, else containerd's and iSulad's own (both: the chart does not know which runtime a node
runs). */}}
{{- define "kae.runtimeConfigDirs" -}}
{{- with (.Values.config.dra | default dict).runtimeConfig }}{{ dir . }}{{ else }}/etc/containerd /etc/isulad{{ end }}
{{- end }}

{{/* The user name the API server gives the plugin's service account (RBAC, admission policy). */}}
{{- define "kae.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" (include "kae.namespace" .) (include "kae.serviceAccountName" .) }}
{{- end }}

{{- define "kae.nfdFeaturesFile" -}}
{{- if .Values.nfd.localFeatures.enabled }}
{{- printf "%s/kae" (.Values.nfd.localFeatures.dir | trimSuffix "/") }}
{{- end }}
{{- end }}

{{/*
"true" when some engine of this DaemonSet's configuration has a VF profile (config.engines.<name>.vfs
not null): only then does the pod get the vf-writer container, the one part that writes sysfs.
*/}}
{{- define "kae.vfProfiles" -}}
{{- range $name, $engine := .Values.config.engines }}
{{- if and (kindIs "map" $engine) (not (kindIs "invalid" (get $engine "vfs"))) }}true{{ end }}
{{- end }}
{{- end }}

{{/* The in-memory directory the daemon and the vf-writer share (requests and answers). */}}
{{- define "kae.vfWriterDir" -}}/run/kae-vf{{- end }}

{{/*
The daemon's config file (format `version: v1`). The per-engine `enabled` flags come from the
operator.enabled* switches; paths are the ones the DaemonSet mounts, so the two cannot disagree.
*/}}
{{- define "kae.configFile" -}}
{{- $c := .Values.config -}}
{{- $engines := dict
      "hpre" (dict "enabled" .Values.operator.enabledHPRE "shares" $c.engines.hpre.shares "functions" $c.engines.hpre.functions)
      "sec" (dict "enabled" .Values.operator.enabledSEC "shares" $c.engines.sec.shares "functions" $c.engines.sec.functions)
      "zip" (dict "enabled" .Values.operator.enabledZIP "shares" $c.engines.zip.shares "functions" $c.engines.zip.functions) -}}
{{- /* A VF profile is written only where one is set: null leaves the node's VFs as they are. */}}
{{- range $name, $engine := $engines }}
{{- $vfs := get (get $c.engines $name) "vfs" }}
{{- if not (kindIs "invalid" $vfs) }}{{ $_ := set $engine "vfs" $vfs }}{{ end }}
{{- end }}
{{- $paths := dict
      "sysfsRoot" (include "kae.sysfsRoot" .)
      "devRoot" (include "kae.devRoot" .)
      "hostDevRoot" "/dev"
      "kubeletRoot" (include "kae.kubeletRoot" .)
      "stateDir" $c.stateDir
      "nfdFeaturesFile" (include "kae.nfdFeaturesFile" .) -}}
{{- if .Values.devicePlugin.fixtureRoot }}
{{- /* Test clusters: a fixture tree mounted at its own host path, so answers name real paths. */}}
{{- $_ := unset $paths "hostDevRoot" }}
{{- end }}
{{- if include "kae.usesCdiDir" . }}
{{- $_ := set $paths "cdiDir" .Values.cdi.specDir }}
{{- end }}
{{- if include "kae.vfProfiles" . }}
{{- $_ := set $paths "vfWriterDir" (include "kae.vfWriterDir" .) }}
{{- end }}
{{- $dra := include "kae.isDra" . }}
{{- $file := dict
      "version" "v1"
      "scanInterval" $c.scanInterval
      "registration" $c.registration
      "autoPrefer" $c.autoPrefer
      "allocationPolicy" $c.allocationPolicy
      "containerSysfsView" $c.containerSysfsView
      "cdi" (and .Values.cdi.enabled (not $dra))
      "metricsAddress" (printf ":%d" (int .Values.metrics.port))
      "log" (dict "level" $c.log.level "format" $c.log.format)
      "paths" $paths
      "engines" $engines
      "env" (dict "uadkNumaHint" $c.env.uadkNumaHint "opensslEngines" $c.env.opensslEngines "opensslConf" $c.env.opensslConf) -}}
{{- if $dra }}
{{- /* The node name comes from $NODE_NAME and the API from the pod's token: not written here.
       `cdi` is off: DRA writes a spec per claim, the device plugin's node-wide one is unused. */}}
{{- $_ := set $file "mode" "dra" }}
{{- with $c.dra }}{{ $_ := set $file "dra" . }}{{ end }}
{{- else if include "kae.isAuto" . }}
{{- /* auto: the daemon chooses at start; `cdi` applies only if it chooses the device plugin. */}}
{{- $_ := set $file "mode" "auto" }}
{{- with $c.dra }}{{ $_ := set $file "dra" . }}{{ end }}
{{- end }}
{{- toYaml $file }}
{{- end }}

{{/*
A hash of the config file's settings that the daemon cannot reload (kae.rules.restartKeys, from
the daemon's table: the mode, the dra section, registration, the paths, the metrics address).
It goes into the pod template, so `helm upgrade` of one of them rolls the pods; the others are
reloaded from the ConfigMap and change no pod.
*/}}
{{- define "kae.restartChecksum" -}}
{{- $file := include "kae.configFile" . | fromYaml }}
{{- $picked := dict }}
{{- range $key := include "kae.rules.restartKeys" . | fromJsonArray }}
{{- $node := $file }}
{{- range $part := splitList "." $key }}
{{- if kindIs "map" $node }}{{ $node = get $node $part }}{{ else }}{{ $node = "" }}{{ end }}
{{- end }}
{{- $_ := set $picked $key $node }}
{{- end }}
{{- toJson $picked | sha256sum }}
{{- end }}

{{/*
True (non-empty) when this release renders the NodeFeatureRule: nfd.nodefeaturerules true, or auto
where the API server serves NFD's CRDs (so a default install works without NFD).
*/}}
{{- define "kae.rendersNodeFeatureRule" -}}
{{- $rule := toString .Values.nfd.nodefeaturerules }}
{{- if or (eq $rule "true") (and (eq $rule "auto") (.Capabilities.APIVersions.Has "nfd.k8s-sigs.io/v1alpha1")) }}true{{ end }}
{{- end }}

{{/*
Where the namespaced objects go: the chart's own namespace with psa.enabled, else the release's.
*/}}
{{- define "kae.namespace" -}}
{{- if .Values.psa.enabled }}{{ .Values.psa.namespace }}{{ else }}{{ .Release.Namespace }}{{ end }}
{{- end }}

{{/*
Per-node configurations (configs: {<name>: <partial config>}). A variant is the default ("") or one
of those names; "kae.variants" lists them, default first, as JSON. Each template that renders per
variant ranges over it and renders with (include "kae.variantContext"): the root context whose
.Values.config has the variant's overrides merged in, plus .configName.
*/}}
{{- define "kae.variants" -}}
{{- concat (list "") (keys .Values.configs | sortAlpha) | toJson }}
{{- end }}

{{- define "kae.configLabel" -}}openfuyao.com/kae.config{{- end }}

{{/* Object name of a variant's DaemonSet and ConfigMap. */}}
{{- define "kae.variantName" -}}
{{- if .configName }}
{{- printf "%s-%s" (include "kae.fullname" .) .configName | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- include "kae.fullname" . }}
{{- end }}
{{- end }}

{{/*
The node-affinity expression that keeps each node to one variant: a named configuration's
DaemonSet takes only nodes labelled with its name, the default one every node not labelled with a
configured name (a label naming no configuration falls back to the default).
*/}}
{{- define "kae.variantAffinity" -}}
{{- if .configName }}
- key: {{ include "kae.configLabel" . }}
  operator: In
  values: [{{ .configName | quote }}]
{{- else if .Values.configs }}
- key: {{ include "kae.configLabel" . }}
  operator: NotIn
  values: {{ keys .Values.configs | sortAlpha | toJson }}
{{- end }}
{{- end }}
