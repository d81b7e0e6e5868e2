{{/* The chart's name, and the release's objects' name: the release name when it holds the chart's. */}}
{{- define "coredns-global.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "coredns-global.fullname" -}}
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

{{- define "coredns-global.selectorLabels" -}}
app.kubernetes.io/name: {{ include "coredns-global.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "coredns-global.labels" -}}
{{ include "coredns-global.selectorLabels" . }}
app.kubernetes.io/part-of: coredns-global
app.kubernetes.io/version: {{ .Chart.AppVersion | replace "+" "_" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The image: no default repository until one is published. */}}
{{- define "coredns-global.image" -}}
{{- $repository := required "image.repository is required: no coredns-global image is published yet. Build one with `make image` and push it (crane, skopeo) or load it into the nodes (kind, k3d, ctr -n k8s.io), as docs/install.md says, then set image.repository (ghcr.io/globaldns/coredns-global for an image loaded as make image names it) and image.tag (make -s image-tag); or install a release's packaged chart, or with linkerd global install, which default to their build's image" .Values.image.repository -}}
{{- with .Values.image.digest }}
{{- printf "%s@%s" $repository . }}
{{- else }}
{{- printf "%s:%s" $repository ($.Values.image.tag | default ($.Chart.AppVersion | replace "+" "_")) }}
{{- end }}
{{- end }}

{{/* The writer's Lease: deploy/base's default name, or one per release when the release is named otherwise. */}}
{{- define "coredns-global.lease" -}}
{{- include "coredns-global.fullname" . }}-writer
{{- end }}

{{/* The writer's globaldns.io/writer label: <lease namespace>.<lease name>, as writer.Owner makes it. */}}
{{- define "coredns-global.writerLabel" -}}
{{- printf "%s.%s" .Release.Namespace (include "coredns-global.lease" .) -}}
{{- end }}

{{/* The writer's globaldns.io/writer as the admission policy matches it: the release's own value;
writer.Owner shortens a longer one to 54 characters and an FNV hash, which Helm cannot compute. */}}
{{- define "coredns-global.writerPattern" -}}
{{- $v := include "coredns-global.writerLabel" . -}}
{{- if le (len $v) 63 -}}
^{{ $v | replace "." "[.]" }}$
{{- else -}}
^{{ regexReplaceAll "[-.]+$" (trunc 54 $v) "" | replace "." "[.]" }}-[0-9a-f]{8}$
{{- end -}}
{{- end }}

{{/* Where Linkerd's Links count; unset (null), the plugin's default. */}}
{{- define "coredns-global.linksNamespace" -}}
{{- .Values.linkerd.multiclusterNamespace | default "linkerd-multicluster" -}}
{{- end }}

{{/* The Corefile. With the default values it is deploy/base's, comments included. */}}
{{- define "coredns-global.corefile" -}}
{{- $zones := .Values.zones -}}
{{- range $zones }}{{ . }}:5353 {{ end }}{
    errors
    bufsize 1232
    health :8080 {
        lameduck 10s
    }
    ready :8181
    prometheus :9153
{{- with .Values.extraConfig.server }}
{{ . | trim | indent 4 }}
{{- end }}
    global{{ if ne (join " " $zones) "global" }} {{ join " " $zones }}{{ end }} {
{{- with .Values.namespaces }}
        namespaces {{ join " " . }}
{{- end }}
{{- if .Values.clusterName }}
        # This cluster's name, as the other clusters' Links call it (the Deployment sets it).
        cluster {$CLUSTER_NAME}
{{- else }}
        # This cluster's name, as the other clusters' Links call it (their --cluster-name): the
        # ClusterProperty cluster.clusterset.k8s.io's, else "local" (with a warning), unless set:
        #   cluster east
{{- end }}
{{- if .Values.localities }}
{{- range $cluster, $labels := .Values.localities }}
        locality {{ $cluster }}{{ range $k, $v := $labels }} {{ $k }}={{ $v }}{{ end }}
{{- end }}
{{- else }}
        # Where each cluster is, this one included; linked clusters in the same zone, then the
        # same region, are answered first. For example:
        #   locality east zone=us-east-1a region=us-east-1
        #   locality west zone=us-east-1b region=us-east-1
{{- end }}
{{- with .Values.topology }}
        topology {{ join " " . }}
{{- end }}
{{- with .Values.mcsZones }}
        names mcs {{ join " " . }}
{{- end }}
{{- if ne .Values.policy.default "all" }}
        policy {{ .Values.policy.default }}
{{- end }}
{{- range $zone, $policy := .Values.policy.byZone }}
        policy {{ $policy }} {{ $zone }}
{{- end }}
{{- if ne (include "coredns-global.linksNamespace" .) "linkerd-multicluster" }}
        links_namespace {{ include "coredns-global.linksNamespace" . }}
{{- end }}
{{- with .Values.clientLocality.sources }}
        client_locality {{ join " " . }}
{{- end }}
{{- with .Values.clientLocality.forwarders }}
        client_forwarders {{ join " " . }}
{{- end }}
{{- if ne (has "ecs" .Values.clientLocality.sources) (not (empty .Values.clientLocality.ecsFrom)) }}
{{- fail "clientLocality: ecs in sources and ecsFrom go together: ecsFrom names the resolvers trusted to set the option (docs/install.md)" }}
{{- end }}
{{- with .Values.clientLocality.ecsFrom }}
        client_ecs_from {{ join " " . }}
{{- end }}
{{- /* The plugin's default (contract.DefaultExplainFrom) is not rendered: the release before,
which has no explain_from, then reads the default Corefile too. null (unset) is the default, [] is
anyone. */}}
{{- $default := list "127.0.0.0/8" "::1/128" }}
{{- $from := .Values.explain.from }}
{{- if kindIs "invalid" $from }}{{ $from = $default }}{{ end }}
{{- $explainFrom := join " " ($from | default (list "0.0.0.0/0" "::/0")) }}
{{- if ne $explainFrom (join " " $default) }}
        explain_from {{ $explainFrom }}
{{- end }}
{{- if not .Values.writer.enabled }}
        endpointslices off
{{- else }}
{{- if .Values.writer.serviceImports }}
        serviceimports on
{{- end }}
{{- if ne .Values.writer.serviceSuffix "-global" }}
        service_suffix {{ .Values.writer.serviceSuffix }}
{{- end }}
        # What it writes goes with the release: the garbage collector deletes it with this.
        owner clusterroles.rbac.authorization.k8s.io {{ include "coredns-global.fullname" . }}-write
{{- if ne (include "coredns-global.lease" .) "coredns-global-writer" }}
        lease {{ .Release.Namespace }} {{ include "coredns-global.lease" . }}
{{- end }}
{{- end }}
{{- with .Values.extraConfig.plugin }}
{{ . | trim | indent 8 }}
{{- end }}
    }
}
{{- end }}
