"""The plugin watcher's registration servicer on its own, over a real unix socket: GetInfo says
exactly what it was given (so a DRA driver and a device plugin differ only in parameters), and
only an accepted registration runs the callback."""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest

from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2 as reg_pb
from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from kae_deviceplugin.kubelet.pluginwatcher import (
    DRA_PLUGIN_TYPE,
    RegistrationServicer,
    add_registration,
)
from tests.support.harness import short_tmpdir

DEADLINE = 10.0


def test_getinfo_answers_the_given_identity_and_notify_runs_the_callback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Type, name, endpoint and versions come back verbatim; accepted -> callback, rejected ->
    an error line and no callback."""
    accepted: list[str] = []

    async def main() -> reg_pb.PluginInfo:
        with short_tmpdir() as workdir:
            socket = workdir / "kae.openfuyao.com-reg.sock"
            server = grpc.aio.server()
            servicer = RegistrationServicer(
                DRA_PLUGIN_TYPE,
                "kae.openfuyao.com",
                "/var/lib/kubelet/plugins/kae.openfuyao.com/dra.sock",
                ["v1.DRAPlugin", "v1beta1.DRAPlugin"],
                lambda: accepted.append("yes"),
            )
            add_registration(server, servicer)
            server.add_insecure_port(f"unix://{socket}")
            await server.start()
            try:
                async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
                    stub = reg_grpc.RegistrationStub(channel)
                    info = await stub.GetInfo(reg_pb.InfoRequest(), timeout=DEADLINE)
                    status = reg_pb.RegistrationStatus(plugin_registered=False, error="bad name")
                    await stub.NotifyRegistrationStatus(status, timeout=DEADLINE)
                    assert accepted == []
                    status = reg_pb.RegistrationStatus(plugin_registered=True)
                    await stub.NotifyRegistrationStatus(status, timeout=DEADLINE)
                return info
            finally:
                await server.stop(None)

    with caplog.at_level(logging.ERROR):
        info = asyncio.run(main())
    assert (info.type, info.name, info.endpoint, list(info.supported_versions)) == (
        "DRAPlugin",
        "kae.openfuyao.com",
        "/var/lib/kubelet/plugins/kae.openfuyao.com/dra.sock",
        ["v1.DRAPlugin", "v1beta1.DRAPlugin"],
    )
    assert accepted == ["yes"]
    assert "rejected the registration: bad name" in caplog.text
