"""No answer can outgrow the daemon's memory: the client in a process of its own under a real
address-space limit (RLIMIT_AS: its size at start plus the chart's 256 MiB; cgroups are not
ours to set here), against a server that sends a 16 MiB list of empty objects (~450 MiB once
parsed), a list of empty objects just under the body limit, an endless chunked body, and a body
of short strings just under the limit (a legitimate shape, ~12x once parsed). Each ends in one
line or a parsed answer, never a MemoryError, and the peak resident size stays bounded."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from kae_deviceplugin.apiserver.http1 import MAX_BODY
from tests.support.apiserver_wire import Request
from tests.support.http_apiserver import write_kubeconfig
from tests.support.raw_http import serving

DEADLINE = 100.0
LIMIT_MIB = 256  # the chart's memory limit
PEAK_BOUND_MIB = 160  # what the child may reach: its start (~25 MiB) and ~12x a 4 MiB body

CHILD = textwrap.dedent(
    """
    import asyncio, json, resource, sys
    from pathlib import Path
    from kae_deviceplugin.apiserver.rest_api import connect
    from kae_deviceplugin.apiserver.seam import NODES
    from kae_deviceplugin.errors import ApiError

    def status(field):
        return int(open("/proc/self/status").read().split(field + ":")[1].split()[0])

    size = status("VmSize") * 1024
    limit = size + int(sys.argv[2]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    async def main():
        client = connect(Path(sys.argv[1]))
        said = {}
        for name in ("flood", "under", "endless", "strings"):
            try:
                got = await client.get(NODES, name)
                said[name] = f"parsed {len(got['items'])} items"
            except ApiError as err:
                said[name] = str(err)
            except MemoryError:
                said[name] = "MemoryError"
        await client.close()
        return said

    said = asyncio.run(main())
    # VmHWM, this program's own peak: ru_maxrss also counts the parent's resident size that
    # the forked child had before exec (a pytest process of 300 MiB late in the suite).
    said["peak_mib"] = status("VmHWM") // 1024
    print(json.dumps(said))
    """
)


def _bodies() -> dict[str, bytes]:
    under = MAX_BODY - 1024
    return {
        "flood": b'{"items":[' + b"{}," * (16 * 1024 * 1024 // 3) + b"{}]}",
        "under": b'{"items":[' + b"{}," * (under // 3) + b"{}]}",
        "strings": b'{"items":[' + b'"ab",' * (under // 5) + b'"ab"]}',
    }


def test_no_answer_outgrows_a_256_mib_address_space(tmp_path: Path) -> None:
    """The four answers under the limit: the flood refused by its length, the empty objects
    by their count before parsing, the endless body at the limit, the strings parsed; the
    child's peak resident size (VmHWM) under PEAK_BOUND_MIB."""
    bodies = _bodies()

    async def respond(request: Request, writer: Any) -> bool:
        name = request.path.rsplit("/", 1)[1]
        head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        if name == "endless":
            writer.write((head + "Transfer-Encoding: chunked\r\n\r\n").encode())
            piece = b"10000\r\n" + b" " * 65536 + b"\r\n"
            while True:
                writer.write(piece)
                await writer.drain()
        payload = bodies[name]
        writer.write(f"{head}Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        await writer.drain()
        return True

    async def main() -> dict[str, Any]:
        async with serving(respond) as server:
            path = write_kubeconfig(tmp_path / "kubeconfig", server.url, "t0")
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-c", CHILD, str(path), str(LIMIT_MIB),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            async with asyncio.timeout(DEADLINE):
                out, err = await child.communicate()
            assert child.returncode == 0, err.decode()[-2000:]
            said: dict[str, Any] = json.loads(out)
            return said

    said = asyncio.run(main())
    assert f"a body larger than {MAX_BODY} bytes (Content-Length" in said["flood"]
    assert "objects or arrays in" in said["under"]
    assert f"a body larger than {MAX_BODY} bytes" in said["endless"]
    assert said["strings"] == f"parsed {(MAX_BODY - 1024) // 5 + 1} items"
    assert said["peak_mib"] < PEAK_BOUND_MIB, said
