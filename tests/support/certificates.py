"""A throwaway CA with a server certificate for 127.0.0.1 and a client certificate, made by the
``openssl`` command (the tests' one use of it: no Python package makes certificates without a
dependency), for the API client's TLS tests."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

OPENSSL = shutil.which("openssl")
EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    assert OPENSSL is not None
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _leaf(directory: Path, name: str, extensions: str) -> None:
    """``name``.crt and ``name``.key, signed by the CA in ``directory``."""
    (directory / f"{name}.ext").write_text(extensions)
    _openssl("req", *EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", f"/CN={name}", cwd=directory)  # fmt: skip
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "1", "-out", f"{name}.crt",
             "-extfile", f"{name}.ext", cwd=directory)  # fmt: skip


def make_certificates(directory: Path) -> Certificates:
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", *EC_KEY, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
             "-subj", "/CN=kae-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)  # fmt: skip
    common = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
    _leaf(
        directory, "server", common + "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
    )
    _leaf(directory, "client", common + "extendedKeyUsage=clientAuth\n")
    return Certificates(
        directory / "ca.crt",
        directory / "server.crt",
        directory / "server.key",
        directory / "client.crt",
        directory / "client.key",
    )
