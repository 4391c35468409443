#!/usr/bin/env bash
# Installs what tests/daemon/test_hotplug_umockdev.py needs (idempotent; Debian/Ubuntu, run as root).
#
#   umockdev      umockdev-wrapper and libumockdev-preload.so.0 (fakes /sys, /dev and uevents)
#   libumockdev0  libumockdev.so.0, the testbed API the tests drive through ctypes
#
# No PyGObject / gir1.2-umockdev-1.0 is needed: ctypes avoids building PyGObject in the venv.
# The daemon reads uevents from a netlink socket of its own, which the preload turns into one
# that hears the testbed's events: no libudev is involved.
#
# Environment: PYTHON (default: python3), the interpreter of the venv the tests run in.
set -euo pipefail

PACKAGES=(umockdev libumockdev0)
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

# Prove the pieces load together, as the tests will use them.
umockdev-wrapper "${PYTHON}" - <<'PY'
import ctypes
import os

assert "libumockdev-preload" in os.environ.get("LD_PRELOAD", ""), "preload not set"
ctypes.CDLL("libumockdev.so.0").umockdev_testbed_new
PY
log "ok: umockdev-wrapper and libumockdev.so.0 work with ${PYTHON}"
