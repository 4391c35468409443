"""Socket names under a long kubelet root: upstream's fallback names, the 107-byte bound, the
bind in a private directory whose own path is too long, and the refusal when nothing fits."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.deviceplugin.servicer import socket_names as device_plugin_names
from kae_deviceplugin.dra.api import (
    DRIVER,
    is_registration_socket,
    may_be_registration_socket,
    plugin_dir,
    registration_names,
    service_names,
    socket_paths,
)
from kae_deviceplugin.kubelet.pluginwatcher import registry_dir
from kae_deviceplugin.kubelet.socket_names import (
    MAX_PATH_BYTES,
    SocketPathTooLong,
    digest,
    first_fitting,
    fits,
)
from kae_deviceplugin.kubelet.sockets import bind_privately
from tests.support.harness import running_node, short_tmpdir

POD_UID = "6f1c1d2e-9a4b-4c3d-8e2f-1a2b3c4d5e6f"


def directory_of(base: Path, length: int) -> Path:
    """A real directory below ``base`` whose path is ``length`` bytes long."""
    path = base / ("d" * (length - len(str(base)) - 1))
    assert len(str(path)) == length
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def long_dir(length: int) -> Iterator[Path]:
    with short_tmpdir() as base:
        yield directory_of(base, length)


def test_the_bound_is_107_bytes_as_grpc_counts_them() -> None:
    """A socket path of 107 bytes is served; one of 108 is not (the sun_path NUL: the
    off-by-one kubernetes#141815 fixed), so that is where ``fits`` draws the line."""

    async def serves(path: str) -> bool:
        server = grpc.aio.server()
        try:
            server.add_insecure_port(f"unix:{path}")  # as bind_privately writes it
        except RuntimeError:
            return False
        finally:
            await server.stop(None)
        return True

    with long_dir(80) as directory:
        at_limit = "s" * (MAX_PATH_BYTES - 81)
        over = at_limit + "s"
        assert fits(directory, at_limit) and not fits(directory, over)
        assert asyncio.run(serves(str(directory / at_limit)))
        assert not asyncio.run(serves(str(directory / over)))


def test_dra_names_follow_upstreams_order_and_are_stable() -> None:
    """Rolling update: <driver>-<uid>-reg.sock, <driver>-<digest of uid>-reg.sock,
    dra-<digest of driver NUL uid>-reg.sock; the service socket dra-<uid>.sock, then
    dra-<digest of uid>.sock. A digest is URL-safe base64 of SHA-256's first bytes; without a
    pod UID there is one name each, as before."""
    assert registration_names(None) == (f"{DRIVER}-reg.sock",)
    assert service_names(None) == ("dra.sock",)
    first, second, third = registration_names(POD_UID)
    assert first == f"{DRIVER}-{POD_UID}-reg.sock"
    assert second == f"{DRIVER}-{digest(POD_UID, size=8)}-reg.sock"
    assert third == f"dra-{digest(DRIVER, POD_UID, size=16)}-reg.sock"
    assert len(digest(POD_UID, size=8)) == 11 and len(digest(DRIVER, POD_UID, size=16)) == 22
    # SHA-256("abc") starts ba7816bf8f01cfea: the digest is that, in URL-safe base64.
    assert digest("abc", size=8) == "ungWv48Bz-o"
    assert service_names(POD_UID) == (f"dra-{POD_UID}.sock", f"dra-{digest(POD_UID, size=8)}.sock")
    assert all(is_registration_socket(n) for n in (first, second))
    assert may_be_registration_socket(third) and not is_registration_socket(third)
    other = registration_names("0b2c7a4e-1111-4222-8333-944445555666")
    assert not set(other) & set(registration_names(POD_UID)), "two pods share no name"


@pytest.mark.parametrize(
    ("root_length", "registration", "service"),
    [(16, 0, 0), (40, 1, 1), (53, 2, 1), (54, 2, 1)],
)
def test_the_first_dra_name_that_fits_is_taken(
    root_length: int, registration: int, service: int
) -> None:
    """The default root keeps the UID names; longer roots take the shorter names, each path
    within the bound (microk8s' 41-byte root takes the digests)."""
    root = Path("/" + "r" * (root_length - 1))
    reg_path, service_path = socket_paths(root, POD_UID)
    assert reg_path == registry_dir(root) / registration_names(POD_UID)[registration]
    assert service_path == plugin_dir(root) / service_names(POD_UID)[service]
    assert all(len(str(p)) <= MAX_PATH_BYTES for p in (reg_path, service_path))


def test_a_root_too_long_for_any_name_is_one_line_naming_the_flag_and_the_limit() -> None:
    """121 bytes (the adversarial round's root): a refusal with exit code 3 that names
    --kubelet-root, the socket it would have made, the 107-byte limit and the longest root
    that would do."""
    root = Path("/" + "r" * 120)
    with pytest.raises(SocketPathTooLong) as caught:
        socket_paths(root, POD_UID)
    message = str(caught.value)
    assert caught.value.exit_code == 3 and "\n" not in message
    assert message.startswith(f"--kubelet-root {root}: ")
    assert "107" in message and "can be at most 54 bytes" in message
    assert socket_paths(Path("/" + "r" * 53), POD_UID)  # 54 bytes: the longest that does


def test_device_plugin_names_are_distinct_and_no_longer_than_kubelet_sock() -> None:
    """Each resource's fallback name is 12 bytes, as kubelet.sock is, so it fits wherever the
    kubelet's own socket does; no two names of ours are alike."""
    names = [name for engine in ENGINES for name in device_plugin_names(engine.resource)]
    assert len(set(names)) == len(names)
    assert all(len(device_plugin_names(e.resource)[1]) == len("kubelet.sock") for e in ENGINES)
    with long_dir(94) as directory:  # kubelet.sock fits, kae-hpre.sock does not
        hpre = device_plugin_names("openfuyao.com/kae.hpre")
        assert first_fitting(directory, hpre, "x", directory).name == hpre[1]


def test_binding_where_the_private_directory_is_too_long_for_an_address() -> None:
    """The final path fits, the private directory beside it does not: the socket is bound
    through /proc/self/fd, made 0600 and renamed into place, where a client reaches it; the
    private directory is gone."""
    with long_dir(90) as directory:
        final = directory / "dra.sock"
        assert fits(directory, final.name)

        async def scenario() -> os.stat_result:
            server = grpc.aio.server()
            try:
                st = await bind_privately(server, final)
                async with grpc.aio.insecure_channel(f"unix://{final}") as channel:
                    await asyncio.wait_for(channel.channel_ready(), 10)
                return st
            finally:
                await server.stop(None)

        st = asyncio.run(scenario())
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
        assert [p.name for p in directory.iterdir()] == ["dra.sock"]  # no private dir left


def test_device_plugin_serves_and_registers_under_a_94_byte_directory() -> None:
    """The kubelet's directory is as long as its kubelet.sock allows: the daemon serves every
    resource (hpre under its 12-byte name), registers the names the kubelet dials in its own
    directory, and the kubelet gets every device."""
    with short_tmpdir() as base:
        directory = directory_of(base, 94)
        with running_node(device_plugin_dir=directory, registration="kubelet-socket") as node:
            assert node.wait_registered(3)
            endpoints = {r.resource: r.endpoint for r in node.kubelet.registrations}
            hpre = "openfuyao.com/kae.hpre"
            assert endpoints[hpre] == device_plugin_names(hpre)[1]
            assert endpoints["openfuyao.com/kae.zip"] == "kae-zip.sock"
            assert all((directory / e).is_socket() for e in endpoints.values())
