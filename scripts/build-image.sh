#!/usr/bin/env bash
# Builds the plugin image with buildah where no image registry is reachable (and so no base image
# can be pulled): a Debian bookworm base is bootstrapped locally with debootstrap, imported into
# buildah's store, and the repository's Dockerfile is built on it with BASE_IMAGE pointing there.
# Not run in CI (it downloads Debian packages and PyPI wheels and takes minutes).
#
# Needs: root, Debian packages `buildah` and `debootstrap` (apt-get install buildah debootstrap),
# README.md and LICENSE present at the repository root (the wheel's metadata reads them).
#
# Usage: scripts/build-image.sh [--arch amd64|arm64] [--tag IMAGE] [--base-cache DIR] [--rebuild-base]
#   --arch          target architecture (default: this machine's). A foreign one needs
#                   qemu-user-static with binfmt_misc registered, for debootstrap and RUN steps.
#   --tag           image name (default localhost/kae-device-plugin:<version>-<arch>)
#   --base-cache    keep the bootstrapped root filesystem as a tarball in DIR and import it from
#                   there when buildah's store has no base image, so debootstrap runs once per
#                   suite, architecture and package set
#   --rebuild-base  bootstrap the base again even if it exists (in the store or in --base-cache)
# Environment: DEBIAN_MIRROR (default: the first Debian URI in this machine's apt sources).
#
# The version (tag and OCI label) is the `__version__` literal in kae_deviceplugin/__init__.py,
# the package's single version source; it is read as text, the package is not imported.
#
# Afterwards: `buildah push <tag> oci-archive:/tmp/kae.tar:<tag>` (or docker-archive:) to move it,
# or combine two arches with `buildah manifest create` / `buildah manifest add`; see docs/image.md.
# scripts/cluster/plugin-image wraps this script with a content-keyed archive cache.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SUITE=bookworm
# python3-venv gives `python3 -m venv` with pip.
BASE_PACKAGES=python3,python3-venv,ca-certificates
arch="$(dpkg --print-architecture)"
tag=""
base_cache=""
rebuild_base=false
usage="usage: $0 [--arch amd64|arm64] [--tag IMAGE] [--base-cache DIR] [--rebuild-base]"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --arch) arch="${2:?${usage}}"; shift 2 ;;
        --tag) tag="${2:?${usage}}"; shift 2 ;;
        --base-cache) base_cache="${2:?${usage}}"; shift 2 ;;
        --rebuild-base) rebuild_base=true; shift ;;
        *) echo "${usage}" >&2; exit 2 ;;
    esac
done

log() { printf 'build-image: %s\n' "$*" >&2; }

for tool in buildah debootstrap; do
    command -v "${tool}" >/dev/null || { log "missing ${tool}: apt-get install ${tool}"; exit 1; }
done
[[ "$(id -u)" == 0 ]] || { log "run as root (debootstrap and buildah's chroot isolation need it)"; exit 1; }
for f in README.md LICENSE; do
    [[ -f "${REPO_ROOT}/${f}" ]] || { log "${f} is missing: the wheel build needs it"; exit 1; }
done

# The literal `__version__ = "X"` (flit reads the same line for the package metadata).
version="$(sed -n 's/^__version__ *= *["'\'']\([^"'\'']*\)["'\''].*/\1/p' \
    "${REPO_ROOT}/kae_deviceplugin/__init__.py" | head -n1)"
[[ -n "${version}" ]] || { log "no __version__ literal in kae_deviceplugin/__init__.py"; exit 1; }
tag="${tag:-localhost/kae-device-plugin:${version}-${arch}}"
# The base's name carries a digest of its package set, so changing the set bootstraps anew.
base_id="${SUITE}-${arch}-$(printf '%s' "${BASE_PACKAGES}" | sha256sum | cut -c1-8)"
base="localhost/kae-base:${base_id}"

debian_mirror() {
    if [[ -n "${DEBIAN_MIRROR:-}" ]]; then
        echo "${DEBIAN_MIRROR}"
        return
    fi
    # deb822 sources first, then one-line sources; skip the security archive.
    local uri
    uri="$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' \
        | grep -v -- '-security' | head -n1 || true)"
    if [[ -z "${uri}" ]]; then
        uri="$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
            | awk '{print $2}' | grep -v -- '-security' | head -n1 || true)"
    fi
    [[ -n "${uri}" ]] || { log "no Debian mirror found: set DEBIAN_MIRROR"; exit 1; }
    echo "${uri}"
}

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# Writes the bootstrapped root filesystem as a tarball to $1.
bootstrap_rootfs() {
    local out="$1" mirror
    mirror="$(debian_mirror)"
    log "bootstrapping ${SUITE}/${arch} from ${mirror} (a few minutes)"
    debootstrap --variant=minbase --arch="${arch}" --include="${BASE_PACKAGES}" \
        "${SUITE}" "${work}/rootfs" "${mirror}" >"${work}/debootstrap.log" 2>&1 \
        || { tail -n 30 "${work}/debootstrap.log" >&2; exit 1; }
    rm -rf "${work}/rootfs/var/lib/apt/lists/"* "${work}/rootfs/var/cache/apt/"*.bin
    tar -C "${work}/rootfs" --numeric-owner -cf "${out}.part" .
    mv -f "${out}.part" "${out}"
    rm -rf "${work}/rootfs"
}

# Imports the tarball $1 into buildah's store as ${base}.
import_base() {
    local ctr
    ctr="$(buildah from --arch "${arch}" scratch)"
    buildah add "${ctr}" "$1" / >/dev/null
    buildah config --arch "${arch}" --os linux \
        --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --cmd /bin/bash "${ctr}"
    buildah commit --rm "${ctr}" "${base}" >/dev/null
    log "base image ${base} ready"
}

base_tar="${work}/rootfs.tar"
if [[ -n "${base_cache}" ]]; then
    mkdir -p "${base_cache}"
    base_tar="${base_cache}/debian-${base_id}-minbase.tar"
fi
if [[ "${rebuild_base}" == true ]]; then
    bootstrap_rootfs "${base_tar}"
    import_base "${base_tar}"
elif ! buildah inspect --type image "${base}" >/dev/null 2>&1; then
    if [[ -s "${base_tar}" ]]; then
        log "importing the cached base ${base_tar}"
    else
        bootstrap_rootfs "${base_tar}"
    fi
    import_base "${base_tar}"
else
    log "reusing base image ${base}"
fi

# pip in the build talks to the package index over TLS. The host may reach it through a TLS proxy
# whose CA only the host bundle has, and Debian's pip uses its own bundle unless told otherwise:
# hand the build the host bundle and a pip config naming it (plus the host's index, if set).
{
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n'
    index="$(python3 -m pip config get global.index-url 2>/dev/null || true)"
    [[ -n "${index}" ]] && printf 'index-url = %s\n' "${index}"
} >"${work}/pip.conf"

log "building ${tag} (version ${version})"
buildah bud --isolation chroot --layers=false \
    --platform "linux/${arch}" \
    --build-arg "BASE_IMAGE=${base}" \
    --build-arg "VERSION=${version}" \
    --build-arg "REVISION=$(git -C "${REPO_ROOT}" rev-parse HEAD 2>/dev/null || echo unknown)" \
    --build-arg "CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    --volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
    --volume "${work}/pip.conf:/etc/pip.conf:ro" \
    --tag "${tag}" \
    --file "${REPO_ROOT}/Dockerfile" \
    "${REPO_ROOT}" >&2
log "built ${tag}"
