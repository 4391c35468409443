#!/usr/bin/env bash
# Builds the plugin image with buildah where no image registry is reachable (and so no base image
# can be pulled): a Debian bookworm base is bootstrapped locally with debootstrap, imported into
# buildah's store, and the repository's Dockerfile is built on it with BASE_IMAGE pointing there.
# Not run in CI (it downloads Debian packages and PyPI wheels and takes minutes).
#
# Needs: root, Debian packages `buildah` and `debootstrap` (apt-get install buildah debootstrap),
# README.md present at the repository root (the wheel's metadata reads it).
#
# Usage: scripts/build-image.sh [--arch amd64|arm64] [--tag IMAGE] [--rebuild-base]
#   --arch          target architecture (default: this machine's). A foreign one needs
#                   qemu-user-static with binfmt_misc registered, for debootstrap and RUN steps.
#   --tag           image name (default localhost/kae-device-plugin:<version>-<arch>)
#   --rebuild-base  bootstrap the base again even if localhost/kae-base:bookworm-<arch> exists
# Environment: DEBIAN_MIRROR (default: the first Debian URI in this machine's apt sources).
#
# Afterwards: `buildah push <tag> docker-archive:/tmp/kae.tar` (or oci-archive:) to move it, or
# combine two arches with `buildah manifest create` / `buildah manifest add`.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SUITE=bookworm
arch="$(dpkg --print-architecture)"
tag=""
rebuild_base=false
while [[ $# -gt 0 ]]; do
    case "$1" in
        --arch) arch="$2"; shift 2 ;;
        --tag) tag="$2"; shift 2 ;;
        --rebuild-base) rebuild_base=true; shift ;;
        *) echo "usage: $0 [--arch amd64|arm64] [--tag IMAGE] [--rebuild-base]" >&2; exit 2 ;;
    esac
done

log() { printf 'build-image: %s\n' "$*" >&2; }

for tool in buildah debootstrap; do
    command -v "${tool}" >/dev/null || { log "missing ${tool}: apt-get install ${tool}"; exit 1; }
done
[[ "$(id -u)" == 0 ]] || { log "run as root (debootstrap and buildah's chroot isolation need it)"; exit 1; }
[[ -f "${REPO_ROOT}/README.md" ]] || { log "README.md is missing: the wheel build needs it"; exit 1; }

version="$(sed -n 's/^version = "\(.*\)"/\1/p' "${REPO_ROOT}/pyproject.toml" | head -n1)"
tag="${tag:-localhost/kae-device-plugin:${version}-${arch}}"
base="localhost/kae-base:${SUITE}-${arch}"

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

if [[ "${rebuild_base}" == true ]] || ! buildah inspect --type image "${base}" >/dev/null 2>&1; then
    mirror="$(debian_mirror)"
    log "bootstrapping ${SUITE}/${arch} from ${mirror} (a few minutes)"
    # python3-venv gives `python3 -m venv` with pip; libudev1 is what pyudev loads.
    debootstrap --variant=minbase --arch="${arch}" \
        --include=python3,python3-venv,libudev1,ca-certificates \
        "${SUITE}" "${work}/rootfs" "${mirror}" >"${work}/debootstrap.log" 2>&1 \
        || { tail -n 30 "${work}/debootstrap.log" >&2; exit 1; }
    rm -rf "${work}/rootfs/var/lib/apt/lists/"* "${work}/rootfs/var/cache/apt/"*.bin
    tar -C "${work}/rootfs" --numeric-owner -cf "${work}/rootfs.tar" .
    rm -rf "${work}/rootfs"
    ctr="$(buildah from --arch "${arch}" scratch)"
    buildah add "${ctr}" "${work}/rootfs.tar" / >/dev/null
    buildah config --arch "${arch}" --os linux \
        --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --cmd /bin/bash "${ctr}"
    buildah commit --rm "${ctr}" "${base}" >/dev/null
    log "base image ${base} ready"
fi

# pip in the build talks to the package index over TLS. The host may reach it through a TLS proxy
# whose CA only the host bundle has, and Debian's pip uses its own bundle unless told otherwise:
# hand the build the host bundle and a pip config naming it (plus the host's index, if set).
{
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n'
    index="$(python3 -m pip config get global.index-url 2>/dev/null || true)"
    [[ -n "${index}" ]] && printf 'index-url = %s\n' "${index}"
} >"${work}/pip.conf"

log "building ${tag}"
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
    "${REPO_ROOT}"
log "built ${tag}"
