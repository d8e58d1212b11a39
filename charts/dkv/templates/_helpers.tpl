{{/*
Labels of every object the templates render: the ones deploy/default's
kustomization gives them, so that both installs carry the same labels.
*/}}
{{- define "dkv.labels" -}}
app.kubernetes.io/name: dkv-operator
app.kubernetes.io/part-of: dkv
{{- end }}

{{/*
The operator's pods: the Deployment's selector (immutable, never more than
these two labels) and the Services' selectors.
*/}}
{{- define "dkv.selectorLabels" -}}
app.kubernetes.io/name: dkv-operator
app.kubernetes.io/component: operator
{{- end }}

{{/*
The operator's image, which DKV_OPERATOR_IMAGE must equal.
*/}}
{{- define "dkv.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{/*
The release namespace, once checked: it must be the namespace the CRD's
conversion webhook calls (crds/ is not templated, so it cannot follow the
release). `helm lint` renders neither an install nor an upgrade and is let
through whatever its --namespace.
*/}}
{{- define "dkv.namespace" -}}
{{- $crd := .Files.Get "crds/distributedkv.yaml" | fromYaml }}
{{- $want := dig "spec" "conversion" "webhook" "clientConfig" "service" "namespace" "" $crd }}
{{- if and $want (ne .Release.Namespace $want) (or .Release.IsInstall .Release.IsUpgrade) }}
{{- fail (printf "the dkv chart installs into namespace %q only (its CRD's conversion webhook calls the Service dkv-operator-webhook there), not %q: use --namespace %s --create-namespace" $want .Release.Namespace $want) }}
{{- end }}
{{- .Release.Namespace }}
{{- end }}

{{/*
The ServiceAccount subject of the bindings.
*/}}
{{- define "dkv.subjects" -}}
subjects:
  - kind: ServiceAccount
    name: dkv-operator
    namespace: {{ include "dkv.namespace" . }}
{{- end }}
