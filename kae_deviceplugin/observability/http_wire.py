"""The bytes of a whole HTTP/1.1 response, shared by the server (its own refusals) and the
answers (every route's reply)."""

from __future__ import annotations


def plain_response(
    status: int, reason: str, body: bytes, content_type: str, *, head_only: bool = False
) -> bytes:
    """A whole HTTP/1.1 response; ``head_only`` (HEAD) keeps the body's length, not the body."""
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Server: kae-deviceplugin\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + (b"" if head_only else body)


TOO_LARGE = plain_response(431, "Request Header Fields Too Large", b"", "text/plain")
INTERNAL_ERROR = plain_response(500, "Internal Server Error", b"", "text/plain")
