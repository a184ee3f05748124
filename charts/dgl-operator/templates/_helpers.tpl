{{- define "dgl-operator.name" -}}dgl-operator{{- end -}}

{{- define "dgl-operator.fullname" -}}
{{- if contains "dgl-operator" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-dgl-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "dgl-operator.labels" -}}
app.kubernetes.io/name: {{ include "dgl-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "dgl-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dgl-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The operator's rules: the same in a ClusterRole and in a Role. */}}
{{- define "dgl-operator.rules" -}}
- apiGroups: ["dgloperator.io"]
  resources: ["dgljobs"]
  verbs: ["get", "list", "watch", "delete"]
- apiGroups: ["dgloperator.io"]
  resources: ["dgljobs/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "patch", "delete", "deletecollection"]
- apiGroups: [""]
  resources: ["configmaps", "serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "patch"]
# Create only: the jobs' token Secrets are created (again) on reconcile,
# never read; the token key is read by name (the -token-key Role).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["scheduling.volcano.sh", "scheduling.x-k8s.io"]
  resources: ["podgroups"]
  verbs: ["get", "create", "patch"]
{{- if .Values.networkPolicy.enabled }}
# Each job's <job>-network policy (deleted with the job by the garbage collector).
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch"]
{{- end }}
{{- end -}}
