#!/usr/bin/env bash
# Proves the Kunpeng (linux/arm64) image: builds it from the Dockerfile and starts it under QEMU's
# user-mode emulation, on an amd64 machine without any image registry. CI runs it (.ci/run).
#
#   1. installs what it lacks by name from Debian (qemu-user-static, buildah, debootstrap) and
#      registers the aarch64 emulator with binfmt_misc itself, with the F flag: the package's own
#      registration needs systemd or binfmt-support, and F (the kernel opens the interpreter once,
#      at registration) is what lets it run inside buildah's chroots;
#   2. gets the image from scripts/cluster/plugin-image --arch arm64, which builds it through
#      scripts/build-image.sh --arch arm64 only when its inputs changed (an OCI archive cached
#      outside the repository, keyed by a digest of them; the debootstrapped base is cached too);
#   3. runs inside it, as the image's own non-root user: `uname -m` (must say aarch64),
#      `kae-deviceplugin --version` (must name the package's __version__), the same of
#      `kubectl-kae` and an import of its CEL library (the `kubectl` extra), `list` on the bundled
#      tree sysfs_fixtures/kunpeng920-2p (every device of the tree, all healthy) and `demo`.
#
# Any failure ends the run with exit 1 and one line starting "check-arm64-image: FAILED:".
# On an arm64 machine nothing is emulated and step 1 only installs buildah and debootstrap.
#
# Usage: scripts/check-arm64-image.sh [--rebuild]   (--rebuild: build even if the archive exists)
# Needs: root. Environment: KAE_E2E_CACHE (the cache; default $HOME/.cache/kae-e2e, shared with
# the e2e stage's amd64 image), KAE_ARM64_BUILD_TIMEOUT (default 30m: a cold build under emulation
# takes about 11 min on 2 cores), KAE_ARM64_RUN_TIMEOUT (per command inside, default 5m).
set -Eeuo pipefail
shopt -s inherit_errexit

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TREE=kunpeng920-2p
BINFMT=/proc/sys/fs/binfmt_misc
usage="usage: $0 [--rebuild]"

log() { printf 'check-arm64-image: %s\n' "$*" >&2; }
fail() {
    printf 'check-arm64-image: FAILED: %s\n' "$*" >&2
    exit 1
}
# A command that fails where no explicit check stands still ends with one FAILED line.
trap 'fail "line ${LINENO}: ${BASH_COMMAND} (exit $?)"' ERR

plugin_image_args=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rebuild) plugin_image_args+=(--rebuild); shift ;;
        -h | --help) echo "${usage}" >&2; exit 0 ;;
        *) echo "${usage}" >&2; exit 2 ;;
    esac
done

[[ "$(id -u)" == 0 ]] || fail "run as root (apt-get, binfmt_misc and buildah need it)"
host_arch="$(dpkg --print-architecture)"
started="$(date +%s)"
elapsed() { echo "$(($(date +%s) - started))s"; }

install_missing() {
    local missing=() p
    local wanted=(buildah debootstrap)
    [[ "${host_arch}" == arm64 ]] || wanted+=(qemu-user-static)
    for p in "${wanted[@]}"; do
        dpkg-query -W -f='${Status}' "${p}" 2>/dev/null | grep -q 'install ok installed' \
            || missing+=("${p}")
    done
    ((${#missing[@]})) || return 0
    log "installing ${missing[*]}"
    apt-get update -qq || fail "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null || fail "apt-get install ${missing[*]}"
}

# Registers qemu-aarch64 from the package's own binfmt.d line unless an entry exists; an entry
# that is disabled or lacks F would fail inside the chroot with a less clear error, so it stops
# the run here.
register_qemu() {
    local conf=/usr/lib/binfmt.d/qemu-aarch64.conf entry="${BINFMT}/qemu-aarch64"
    mountpoint -q "${BINFMT}" || mount -t binfmt_misc binfmt_misc "${BINFMT}" \
        || fail "cannot mount binfmt_misc on ${BINFMT}"
    [[ "$(cat "${BINFMT}/status")" == enabled ]] || fail "binfmt_misc is disabled (${BINFMT}/status)"
    if [[ ! -e "${entry}" ]]; then
        [[ -s "${conf}" ]] || fail "${conf} missing: is qemu-user-static installed?"
        grep -q ':[A-Z]*F[A-Z]*$' "${conf}" || fail "${conf} lacks the F flag"
        cat "${conf}" >"${BINFMT}/register" || fail "registering ${conf} with binfmt_misc"
        log "registered qemu-aarch64 with binfmt_misc (left registered; 'echo -1 >${entry}' removes it)"
    fi
    [[ "$(head -n1 "${entry}")" == enabled ]] || fail "${entry} is disabled: echo 1 >${entry}"
    grep -q '^flags:.*F' "${entry}" \
        || fail "${entry} has no F flag, so chroots cannot reach the emulator: echo -1 >${entry}, rerun"
}

install_missing
[[ "${host_arch}" == arm64 ]] || register_qemu

version="$(sed -n 's/^__version__ *= *["'\'']\([^"'\'']*\)["'\''].*/\1/p' \
    "${REPO_ROOT}/kae_deviceplugin/__init__.py" | head -n1)"
[[ -n "${version}" ]] || fail "no __version__ literal in kae_deviceplugin/__init__.py"

# The archive names the image <version>-arm64, the name scripts/build-image.sh gives an arm64
# build: importing it into buildah's store must not take the name of an amd64 image kept there.
tag="localhost/kae-device-plugin:${version}-arm64"
plugin_image_args+=(--arch arm64 --tag "${tag}")

log "getting the arm64 image (cached by its inputs; a cold build takes minutes)"
build_log="$(mktemp)"
build_out="$(mktemp)"
run_err="$(mktemp)"
ctr=""
image=""
cleanup() {
    [[ -z "${ctr}" ]] || buildah rm "${ctr}" >/dev/null 2>&1 || true
    # Another run may use the same image: then it stays, which costs nothing but disk.
    [[ -z "${image}" ]] || buildah rmi "${image}" >/dev/null 2>&1 || true
    rm -f "${build_log}" "${build_out}" "${run_err}"
}
trap cleanup EXIT
limit="${KAE_ARM64_BUILD_TIMEOUT:-30m}"
rc=0
timeout "${limit}" "${REPO_ROOT}/scripts/cluster/plugin-image" "${plugin_image_args[@]}" \
    >"${build_out}" 2>"${build_log}" || rc=$?
if ((rc)); then
    tail -n 40 "${build_log}" >&2
    ((rc != 124)) || fail "building the arm64 image took longer than ${limit} (log above)"
    fail "building the arm64 image: scripts/cluster/plugin-image exited ${rc} (log above)"
fi
archive="$(tail -n1 "${build_out}")"
[[ -s "${archive}" ]] || fail "scripts/cluster/plugin-image named no archive ('${archive}')"
grep '^plugin-image:' "${build_log}" >&2 || true
log "image archive ready after $(elapsed): ${archive}"

image="$(buildah pull --quiet --arch arm64 "oci-archive:${archive}")" || fail "buildah pull oci-archive:${archive}"
image_arch="$(buildah inspect --type image --format '{{.OCIv1.Architecture}}' "${image}")"
[[ "${image_arch}" == arm64 ]] || fail "the archive's image is for ${image_arch}, not arm64"
ctr="$(buildah from --pull=never "${image}")" || fail "buildah from ${image}"

# Runs "$@" inside the image, the fixture tree mounted read-only, and leaves its stdout in
# ${out}; a non-zero exit or a hang past the timeout is a failure named by $1, its stderr shown.
# (Not a command substitution: fail must end this shell, not a subshell of it.)
out=""
inside() {
    local what="$1" limit="${KAE_ARM64_RUN_TIMEOUT:-5m}" rc=0
    shift
    out="$(timeout "${limit}" buildah run --isolation chroot \
        -v "${REPO_ROOT}/sysfs_fixtures/${TREE}:/fixture:ro" "${ctr}" -- "$@" 2>"${run_err}")" || rc=$?
    ((rc)) || return 0
    cat "${run_err}" >&2
    printf '%s\n' "${out}" >&2
    ((rc != 124)) || fail "${what} did not finish within ${limit} inside the arm64 image"
    fail "${what} exited ${rc} inside the arm64 image"
}

inside "uname -m" uname -m
[[ "${out}" == aarch64 ]] || fail "uname -m inside says '${out}', not aarch64"

inside "kae-deviceplugin --version" kae-deviceplugin --version
[[ "${out}" == "kae-deviceplugin, version ${version}" ]] \
    || fail "--version inside says '${out}', not version ${version}"

inside "kubectl-kae --version" kubectl-kae --version
[[ "${out}" == "kubectl-kae, version ${version}" ]] \
    || fail "kubectl-kae --version inside says '${out}', not version ${version}"
# The kubectl extra's CEL library, with its compiled parts (google-re2, pendulum) for aarch64.
inside "the CEL library of kubectl kae why" python3 -c "import celpy, re2, pendulum"

inside "kae-deviceplugin list" kae-deviceplugin list --sysfs-root /fixture/sys --dev-root /fixture/dev
printf '%s\n' "${out}" >&2
# The expected devices come from the tree itself, not from a second copy of its contents.
names=()
for entry in "${REPO_ROOT}/sysfs_fixtures/${TREE}/sys/class/uacce/"*; do
    [[ -L "${entry}" ]] && names+=("${entry##*/}")
done
((${#names[@]})) || fail "the fixture ${TREE} has no uacce devices"
for name in "${names[@]}"; do
    grep -Eq "^[a-z]+ +${name} .* Healthy " <<<"${out}" \
        || fail "list inside the image does not show ${name} as Healthy"
done
n="${#names[@]}"
grep -qx "${n} devices: ${n} healthy, 0 unhealthy" <<<"${out}" \
    || fail "list inside the image does not end with '${n} devices: ${n} healthy, 0 unhealthy'"

inside "kae-deviceplugin demo" kae-deviceplugin demo
if ! grep -qx "The kubelet sees 3 resources registered:" <<<"${out}"; then
    printf '%s\n' "${out}" >&2
    fail "demo inside the image did not see 3 resources registered"
fi
allocations="$(grep -c '^Allocate .* gives the container:$' <<<"${out}" || true)"
if [[ "${allocations}" != 3 ]]; then
    printf '%s\n' "${out}" >&2
    fail "demo inside the image made ${allocations} allocations, not 3"
fi

log "ok: linux/arm64 image ${version} ran uname -m (aarch64), --version, list (${n} devices) and demo (3 allocations) under emulation in $(elapsed)"
