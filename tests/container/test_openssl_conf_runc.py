"""``env.opensslConf`` read by a real OpenSSL inside a real runc container built from the plugin's
own answers: an Allocate answer (device plugin) and a prepared claim's CDI spec (DRA).

The OpenSSL is Debian's ``openssl`` 3.x (the host's /usr, bind-mounted), not the 1.1.1 the KAE
engines are built for. What that proves: the file's syntax (``.include``, ``[ default ]``, the
``engines.<suffix>`` module line, the engine section's ``soft_load``/``init`` pseudo-commands)
and the engine configuration module's behaviour, which OpenSSL 3 kept from 1.1.1 (the ENGINE API
is deprecated in 3, not changed); that the image's own configuration (Debian's, with
``config_diagnostics = 1``, plus an activated legacy provider as the image's own setting) stays
in force; that an absent engine fails nothing; and that an engine present under
``OPENSSL_ENGINES`` receives the five ``UADK_CMD_ENABLE_<ALG>_ENV`` switches. The engine there
is a stand-in built from ``tests/support/standin_engine.c`` (same ids and commands as uadk_engine
and the KAE engine; it reports what it receives), as the real engines need UADK and aarch64.
What it does not prove: that a real engine then sizes its queues by ``WD_<ALG>_CTX_NUM`` (the
engines' own code, read in FACTS §12).
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest

from kae_deviceplugin.config.settings import EnvSettings
from kae_deviceplugin.container.openssl_conf import CONTAINER_FILE, render
from kae_deviceplugin.testing.cdi_container import run_container
from tests.support import oci_bundle
from tests.support.dra_claims import Result, claim_object
from tests.support.dra_kubelet import Claim
from tests.support.dra_process import NODE, device_names, dra_node, dra_process
from tests.support.harness import running_node
from tests.support.http_apiserver import HttpApiServer

OPENSSL = shutil.which("openssl")
HPRE = "openfuyao.com/kae.hpre"
ENGINES_DIR = "/opt/kae/engines"  # env.opensslEngines, where the image keeps its engines
STANDIN = Path(__file__).resolve().parents[1] / "support" / "standin_engine.c"
SWITCHES = ("CIPHER", "DIGEST", "RSA", "DH", "ECC")
# The image's own settings, added to Debian's configuration: the legacy provider activated.
IMAGE_OWN = """
[openssl_init]
providers = provider_sect
[provider_sect]
default = default_sect
legacy = legacy_sect
[default_sect]
activate = 1
[legacy_sect]
activate = 1
"""
SCRIPT = r"""
echo "OPENSSL_CONF=$OPENSSL_CONF"
openssl list -providers | sed -n 's/^  \([a-z][a-z]*\)$/provider \1/p'
openssl dgst -md4 /dev/null >/dev/null && echo "md4 ok"
openssl rand -hex 4 >/dev/null && echo "rand ok"
"""


@pytest.fixture(scope="module")
def runc_usable() -> None:
    reason = oci_bundle.runc_unusable()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture
def image_ssl(tmp_path: Path) -> Path:
    """The image's /etc/ssl: Debian's openssl.cnf (config_diagnostics = 1) plus its own
    setting."""
    debian = Path("/etc/ssl/openssl.cnf").read_text()
    assert "config_diagnostics = 1" in debian, "not Debian's OpenSSL 3 configuration"
    directory = tmp_path / "image-ssl"
    directory.mkdir()
    (directory / "openssl.cnf").write_text(debian + IMAGE_OWN)
    return directory


@pytest.fixture
def engines(tmp_path: Path) -> Path:
    """uadk_engine.so and kae.so stand-ins, built here (skip without a C compiler and the
    OpenSSL headers)."""
    compiler = shutil.which("cc")
    if compiler is None or not Path("/usr/include/openssl/engine.h").exists():
        pytest.skip("no C compiler or OpenSSL headers (libssl-dev) to build the stand-in engine")
    directory = tmp_path / "engines"
    directory.mkdir()
    for engine_id in ("uadk_engine", "kae"):
        subprocess.run(
            [compiler, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", f'-DENGINE_ID="{engine_id}"',
             "-o", str(directory / f"{engine_id}.so"), str(STANDIN), "-lcrypto"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    return directory


def in_container(
    mounts: list[oci_bundle.Mount], env: Mapping[str, str]
) -> subprocess.CompletedProcess[str]:
    result = oci_bundle.run(["sh", "-c", SCRIPT], mounts, env=[f"{k}={v}" for k, v in env.items()])
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def check_runs(
    mounts: list[oci_bundle.Mount], env: Mapping[str, str], image: Path, built: Path
) -> None:
    """Without the engines: the image's settings in force (legacy provider, MD4), every command
    succeeds, nothing reaches an engine. With them: the same, and each engine got each switch."""
    base = [*mounts, oci_bundle.bind(image, "/etc/ssl")]
    absent = in_container(base, env)
    assert f"OPENSSL_CONF={CONTAINER_FILE}" in absent.stdout
    lines = absent.stdout.splitlines()
    assert {"provider default", "provider legacy", "md4 ok", "rand ok"} <= set(lines), absent.stdout
    assert "got UADK_CMD" not in absent.stderr, absent.stderr
    present = in_container([*base, oci_bundle.bind(built, ENGINES_DIR)], env)
    assert {"provider legacy", "md4 ok", "rand ok"} <= set(present.stdout.splitlines())
    for engine_id in ("uadk_engine", "kae"):
        for switch in SWITCHES:
            assert f"engine {engine_id} got UADK_CMD_ENABLE_{switch}_ENV=1" in present.stderr


@pytest.mark.usefixtures("runc_usable")
def test_an_allocate_answer_gives_a_config_the_image_openssl_obeys(
    image_ssl: Path, engines: Path
) -> None:
    """Device plugin: Allocate of hpre-2 with opensslConf on names OPENSSL_CONF and mounts its
    directory beside the grant's WD_RSA_CTX_NUM; in a runc container of that answer Debian's
    openssl keeps the image's settings, fails nothing without the engines, and hands both
    engines the switches when they are there."""
    env = EnvSettings(uadk_numa_hint=True, openssl_engines=ENGINES_DIR, openssl_conf=True)
    with running_node("kunpeng920-2p", env=env) as node:
        assert node.wait_registered()
        answer = node.kubelet.allocate(HPRE, ["0000:79:00.0"]).container_responses[0]
        envs = dict(answer.envs)
        assert envs["OPENSSL_CONF"] == CONTAINER_FILE and "WD_RSA_CTX_NUM" in envs
        host = {"/sys": node.root / "sys", "/dev": node.root / "dev"}
        mounts = [*oci_bundle.base_mounts(), *oci_bundle.allocate_mounts([answer], host)]
        check_runs(mounts, envs, image_ssl, engines)


@pytest.mark.usefixtures("runc_usable")
def test_a_prepared_claim_gives_a_config_the_image_openssl_obeys(
    image_ssl: Path, engines: Path
) -> None:
    """DRA: a claim prepared with --openssl-conf on; the container the runtime builds from its
    CDI spec (env and mounts) reads the configuration as in device-plugin mode."""
    with HttpApiServer() as api:
        api.seed_node(NODE)
        result = Result("hpre", "hpre-0000-79-00-0", NODE)
        claim = api.seed("resourceclaims", claim_object("shop", "tls", [result]))
        flags = ["--openssl-conf", "on", "--openssl-engines", ENGINES_DIR]
        with dra_node("kunpeng920-2p") as node, dra_process(node, api, args=flags) as dra:
            dra.register()
            assert api.wait_for(lambda: result.device in device_names(api.slices()), 10)
            ref = Claim("shop", "tls", claim["metadata"]["uid"])
            prepared = dra.prepare([ref])[ref.uid]
            assert prepared.error == "", prepared.error
            names = [name for d in prepared.devices for name in d.cdi_ids]
            container = run_container(node.cdi_dir, names)
            assert container.env["OPENSSL_CONF"] == CONTAINER_FILE
            mounts = [*oci_bundle.base_mounts()]
            for path, (host, options) in container.mounts.items():
                mounts.append(oci_bundle.bind(host, path, read_only="ro" in options))
            for path, host in container.device_nodes.items():
                mounts.append(oci_bundle.bind(host, path, read_only=False))
            check_runs(mounts, container.env, image_ssl, engines)


@pytest.mark.skipif(OPENSSL is None, reason="no openssl binary (Debian package openssl)")
def test_soft_load_is_what_keeps_an_absent_engine_from_failing_every_command(
    tmp_path: Path,
) -> None:
    """Why the engines' section starts with soft_load: the same file without it makes every
    openssl command fail where no engine is installed (Debian's config_diagnostics = 1), naming
    our section; with it, the command runs."""
    assert OPENSSL is not None
    ours = tmp_path / f"{uuid.uuid4().hex}.cnf"
    ours.write_text(render())
    env = {"PATH": "/usr/bin:/bin", "OPENSSL_CONF": str(ours), "OPENSSL_ENGINES": str(tmp_path)}
    ok = subprocess.run(
        [OPENSSL, "rand", "-hex", "4"], env=env, capture_output=True, text=True, check=False
    )
    assert ok.returncode == 0, ok.stderr
    ours.write_text(render().replace("soft_load = 1\n", ""))
    failed = subprocess.run(
        [OPENSSL, "rand", "-hex", "4"], env=env, capture_output=True, text=True, check=False
    )
    assert failed.returncode != 0 and "kae_grant" in failed.stderr, failed.stderr


@pytest.mark.skipif(OPENSSL is None, reason="no openssl binary (Debian package openssl)")
def test_a_kae_build_s_own_config_after_the_distro_s_keeps_its_engine_and_gets_the_switches(
    tmp_path: Path, engines: Path
) -> None:
    """An image with the distro's configuration and a KAE build's (the KAE engine loaded by
    dynamic_path from its own directory, named by openssl_def): both are read, each from the
    default section (the distro's last section does not swallow the KAE file's top-level
    lines), the KAE one's openssl_conf wins, and its engine gets the switches."""
    assert OPENSSL is not None
    own = tmp_path / "kae-build"
    own.mkdir()
    shutil.copy(engines / "kae.so", own / "kae.so")
    kae_cnf = own / "openssl.cnf"
    kae_cnf.write_text(
        "openssl_conf = openssl_def\n[openssl_def]\nengines = engine_section\n"
        "[engine_section]\nkae = kae_section\n[kae_section]\nengine_id = kae\n"
        f"dynamic_path = {own / 'kae.so'}\ndefault_algorithms = ALL\ninit = 1\n"
    )
    ours = tmp_path / "ours.cnf"
    ours.write_text(render(("/etc/ssl/openssl.cnf", str(kae_cnf))))
    env = {"PATH": "/usr/bin:/bin", "OPENSSL_CONF": str(ours), "OPENSSL_ENGINES": str(tmp_path)}
    done = subprocess.run(
        [OPENSSL, "rand", "-hex", "4"], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    for switch in SWITCHES:
        assert f"engine kae got UADK_CMD_ENABLE_{switch}_ENV=1" in done.stderr
    swallowed = render(("/etc/ssl/openssl.cnf", str(kae_cnf))).replace("[ default ]\n", "")
    ours.write_text(f"[ default ]\n{swallowed}")
    lost = subprocess.run(
        [OPENSSL, "rand", "-hex", "4"], env=env, capture_output=True, text=True, check=False
    )
    assert "engine kae got" not in lost.stderr  # openssl_def landed in Debian's last section
