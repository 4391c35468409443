#!/usr/bin/env bash
# Installs what tests/daemon/test_hotplug_umockdev.py needs (idempotent; Debian/Ubuntu, run as root).
#
#   umockdev      umockdev-wrapper and libumockdev-preload.so.0 (fakes /sys, /dev and uevents)
#   libumockdev0  libumockdev.so.0, the testbed API the tests drive through ctypes
#   libudev1      what pyudev loads (already on almost every Debian system)
#
# No PyGObject / gir1.2-umockdev-1.0 is needed: ctypes avoids building PyGObject in the venv.
# pyudev comes with the project's own dependencies; it is installed here only if missing.
#
# Environment: PYTHON (default: python3), the interpreter of the venv the tests run in.
set -euo pipefail

PACKAGES=(umockdev libumockdev0 libudev1)
PYTHON="${PYTHON:-python3}"

log() { printf 'ci-install-umockdev: %s\n' "$*" >&2; }

missing=()
for package in "${PACKAGES[@]}"; do
    status="$(dpkg-query -W -f='${Status}' "${package}" 2>/dev/null || true)"
    [[ "${status}" == "install ok installed" ]] || missing+=("${package}")
done

if ((${#missing[@]})); then
    if [[ "$(id -u)" != 0 ]]; then
        log "need root to install: ${missing[*]}"
        exit 1
    fi
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
    log "Debian packages already installed: ${PACKAGES[*]}"
fi

if ! "${PYTHON}" -c 'import pyudev' 2>/dev/null; then
    log "installing pyudev into $("${PYTHON}" -c 'import sys; print(sys.prefix)')"
    "${PYTHON}" -m pip install --quiet 'pyudev>=0.24'
fi

# Prove the pieces load together, as the tests will use them.
umockdev-wrapper "${PYTHON}" - <<'PY'
import ctypes
import os

import pyudev

assert "libumockdev-preload" in os.environ.get("LD_PRELOAD", ""), "preload not set"
ctypes.CDLL("libumockdev.so.0").umockdev_testbed_new
pyudev.Context()
PY
log "ok: umockdev-wrapper, libumockdev.so.0 and pyudev work with ${PYTHON}"
