{{/*
Object names are fixed (sluice-operator, as in deploy/operator/): the CRD, the ClusterRole and the
admission policy are cluster-wide, so the chart installs once per cluster, and fixed names let a
kustomize install be taken over by the chart without renaming anything.
*/}}

{{/* Labels of the operator's objects: the selector label plus the common ones. */}}
{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
{{ include "sluice.commonLabels" . }}
{{- end }}

{{/* Helm's conventional labels, on every object; shipped manifests keep their own name label. */}}
{{- define "sluice.commonLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sluice
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
The selector: the same one label as deploy/operator/ (selectors are immutable, so a Deployment
installed with kustomize can be upgraded in place by the chart).
*/}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: sluice-operator
{{- end }}

{{- define "sluice.serviceAccountName" -}}
{{ .Values.serviceAccount.name }}
{{- end }}

{{/* The operator image, by digest when one is given; readers default to the same reference. */}}
{{- define "sluice.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}:{{ $tag }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end }}

{{/*
A manifest of deploy/ (linked under files/, so both installs read the same file), with the common
labels added to its own, the release namespace when namespaced, and the `extra` labels (which win). Arguments:
root (the chart context), path, and optionally namespaced (bool), extra (dict of labels) and
annotations (dict, added to the object's own).
*/}}
{{- define "sluice.shipped" -}}
{{- $object := .root.Files.Get .path | fromYaml -}}
{{- if hasKey $object "Error" -}}
{{- fail (printf "%s: %s" .path $object.Error) -}}
{{- end -}}
{{- include "sluice.relabel" (dict "root" .root "object" $object "namespaced" .namespaced "extra" .extra "annotations" .annotations) -}}
{{- end }}

{{/* Adds the common labels (and the release namespace) to an object already parsed; prints it. */}}
{{- define "sluice.relabel" -}}
{{- $meta := .object.metadata -}}
{{- $labels := merge (dict) (.extra | default dict) ($meta.labels | default dict) (include "sluice.commonLabels" .root | fromYaml) -}}
{{- $_ := set $meta "labels" $labels -}}
{{- if .annotations -}}
{{- $_ := set $meta "annotations" (merge (dict) .annotations ($meta.annotations | default dict)) -}}
{{- end -}}
{{- if .namespaced -}}
{{- $_ := set $meta "namespace" .root.Release.Namespace -}}
{{- end -}}
{{ toYaml .object }}
{{- end }}
