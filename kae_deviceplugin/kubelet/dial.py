"""Dialling a unix socket that the other side may have just replaced.

gRPC's global subchannel pool hands a new channel the connection an old channel to the same
target left behind. When the server at that path restarted (the kubelet, a plugin, a driver),
that connection may be dead before gRPC noticed, and the new channel's first call fails with
"Stream removed (Broken pipe)". Each channel here keeps its own subchannels, so a new channel
always dials the socket that is there now.
"""

from __future__ import annotations

from pathlib import Path

OWN_CONNECTION = ("grpc.use_local_subchannel_pool", 1)


def unix_target(socket: Path) -> str:
    """The gRPC target of ``socket``."""
    return f"unix://{socket}"
