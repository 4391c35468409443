"""The OpenSSL configuration that makes the OpenSSL 1.1.1 KAE engines obey a queue grant.

uadk_engine (engine id ``uadk_engine``) and the KAE engine (``kae``) size their queues by
UADK's ``WD_<ALG>_CTX_NUM`` only when their control command ``UADK_CMD_ENABLE_<ALG>_ENV`` is 1,
which only an OpenSSL configuration sets; without it a process takes a fixed count whatever
the grant says. With ``env.opensslConf`` on, every container gets ``OPENSSL_CONF`` naming this
node-wide file (mounted read-only), which

* ``.include``\\ s the image's own default configuration from where the usual builds keep it,
  each preceded by ``[ default ]`` (OpenSSL carries the current section across an include, so
  a file's top-level lines would otherwise land in the previous file's last section). A missing
  include is skipped by OpenSSL 1.1.1 and 3.x alike;
* adds ``engines.kae_grant = kae_grant_engines`` to the init sections the usual configurations
  name with ``openssl_conf`` (a module name may carry a ``.suffix``, so this runs the engines
  module once more beside the image's own ``engines``), and to its own init section, which
  ``openssl_conf`` names only where the image's configuration names none (set before the
  includes, so the image's own value wins);
* configures both engine ids with ``soft_load = 1`` first, no ``dynamic_path`` and ``init =
  0``: an engine the image lacks is skipped silently (without ``soft_load`` a missing engine
  fails every ``openssl`` command where the configuration has ``config_diagnostics = 1``, as
  Debian's OpenSSL 3 does), and one the image has gets the switches whether or not its own
  configuration loaded it (the engines read them when an algorithm first starts).

Only the switches every engine version with the feature knows are set (cipher, digest, RSA, DH,
ECC): an engine refuses an unknown command, and that too would fail the configuration. AEAD's
switch exists only in newer engines; an image whose engine has it sets it in its own file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from kae_deviceplugin.container import safe_fs

DIR_NAME = "openssl"  # under the state directory
FILE_NAME = "openssl.cnf"
CONTAINER_DIR = "/etc/kae-deviceplugin/openssl"
CONTAINER_FILE = f"{CONTAINER_DIR}/{FILE_NAME}"
# Where the usual builds keep the default: Debian, Ubuntu, Alpine and SUSE; openEuler and the
# RHEL family; OpenSSL built from source with its default prefix (KAE's and UADK's guides). The
# last one read wins where two set the same value.
IMAGE_DEFAULTS = ("/etc/ssl/openssl.cnf", "/etc/pki/tls/openssl.cnf", "/usr/local/ssl/openssl.cnf")
# The init sections those configurations name: OpenSSL 3's own and Debian's; KAE's and
# uadk_engine's samples; Debian's OpenSSL 1.1.1; openEuler's and RHEL's OpenSSL 1.1.1.
INIT_SECTIONS = ("openssl_init", "openssl_def", "default_conf", "default_modules")
OWN_INIT = "kae_grant_init"
ENGINE_IDS = ("uadk_engine", "kae")
SWITCHES = ("CIPHER", "DIGEST", "RSA", "DH", "ECC")


def conf_dir(state_dir: Path) -> Path:
    """The host directory holding the file (mounted whole: a rename reaches running pods)."""
    return state_dir / DIR_NAME


def render(defaults: Sequence[str] = IMAGE_DEFAULTS) -> str:
    """The file's text; ``defaults``: the image configurations to include, in order."""
    lines = [
        "# Written by the KAE device plugin (env.opensslConf): the image's own OpenSSL",
        "# configuration, then the switches that make the KAE engines size their queues by",
        "# WD_<ALG>_CTX_NUM, the container's grant. Engines the image lacks are skipped.",
        f"openssl_conf = {OWN_INIT}",
    ]
    for path in defaults:
        lines += ["[ default ]", f".include {path}"]
    for section in (OWN_INIT, *INIT_SECTIONS):
        lines += [f"[ {section} ]", "engines.kae_grant = kae_grant_engines"]
    lines += ["[ kae_grant_engines ]"]
    lines += [f"{engine} = kae_grant_switches" for engine in ENGINE_IDS]
    lines += ["[ kae_grant_switches ]", "soft_load = 1", "init = 0"]
    lines += [f"UADK_CMD_ENABLE_{name}_ENV = 1" for name in SWITCHES]
    return "\n".join(lines) + "\n"


def write_conf(state_dir: Path) -> bool:
    """Write the file if its content differs (atomically; not fsynced: every reconcile writes it
    again); True when written. OSError names the file."""
    directory = conf_dir(state_dir)
    data = render().encode()
    try:
        with safe_fs.open_root(state_dir) as state_fd:
            fd = safe_fs.open_subdir(state_fd, DIR_NAME, directory)
            try:
                if safe_fs.read_file(fd, FILE_NAME) == data:
                    return False
                safe_fs.write_file(fd, FILE_NAME, data, mode=0o644, durable=False)
            finally:
                os.close(fd)
    except safe_fs.UnsafePath:
        raise
    except OSError as err:
        raise OSError(
            f"cannot write the OpenSSL configuration {directory / FILE_NAME}: {err.strerror or err}"
        ) from err
    return True
