"""What the API client's failures say: each becomes an ``errors.ApiError`` naming the call and
the server, in the words the driver's logs, ``/readyz``, ``doctor`` and the hints
(``hints.py``) have always used: "<verb> <plural>[/<name>] at <server>: <message> (HTTP <code>
<reason>)" for a Status object, "HTTP <code> <phrase>" for an answer that is none (a proxy's
page), "API server not reachable (...)" where no answer came, "undecodable event" for a watch
line that is no event."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from kae_deviceplugin.apiserver.credentials import CredentialError
from kae_deviceplugin.apiserver.http1 import Head, ProtocolError
from kae_deviceplugin.errors import UNREACHABLE, ApiError, clipped


class Refused(Exception):
    """An answer that is no success: its head and body, turned into an ApiError by
    ``translated``."""

    def __init__(self, head: Head, body: bytes) -> None:
        super().__init__(f"HTTP {head.status}")
        self.head = head
        self.body = body


class EventError(Exception):
    """A watch's ERROR event: its Status object (410 Gone: the version is too old)."""

    def __init__(self, status: Mapping[str, Any]) -> None:
        super().__init__(str(status.get("message") or ""))
        self.status = status


class Silent(TimeoutError):
    """No answer (or, on a watch, no line) within the time allowed; says which."""


def status_object(head: Head, body: bytes) -> Mapping[str, Any] | None:
    """The answer's Status object, when it is JSON (as the API server's refusals are)."""
    if not head.headers.get("content-type", "").startswith("application/json"):
        return None
    try:
        found = json.loads(body)
    except ValueError:
        return None
    return found if isinstance(found, Mapping) else None


def status_said(status: Mapping[str, Any], code: int) -> tuple[str, int, str]:
    """A Status object's words: "<message> (HTTP <code> <reason>)", its code (``code`` where it
    has none) and its reason; a Status without a message reads as its code, never "None"."""
    code = int(status.get("code") or code)
    reason = str(status.get("reason") or "")
    said = f"HTTP {code or '?'} {reason}".rstrip()
    if status.get("message"):
        said = f"{status['message']} ({said})"
    return said, code, reason


def described(verb: str, plural: str, name: str | None, server: str) -> tuple[str, dict[str, Any]]:
    """The call as every error names it, "<verb> <plural>[/<name>] at <server>", and the
    ``ApiError`` fields that say what was asked."""
    what = f"{verb} {plural}" + (f"/{clipped(name)}" if name else "")  # a name sent to us
    return (f"{what} at {server}" if server else what), {"verb": verb, "resource": plural}


def not_a_status(at: str, code: int, phrase: str, asked: Mapping[str, Any]) -> ApiError:
    """A refusal whose answer is no Status object (a proxy's page): its HTTP status alone."""
    return ApiError(f"{at}: HTTP {code} {phrase}".rstrip(), status=code, **asked)


def _unreachable(err: BaseException) -> str:
    if isinstance(err, TimeoutError):
        return str(err) or "no answer in time"
    if isinstance(err, asyncio.IncompleteReadError):
        return "the connection closed in the middle of an answer"
    if isinstance(err, OSError) and err.strerror:
        return f"{type(err).__name__}: {err.strerror}"
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


@contextlib.asynccontextmanager
async def translated(
    verb: str, plural: str, name: str | None, server: str, *, stream: bool = False
) -> AsyncIterator[None]:
    """Turns what a call meets into ``errors.ApiError``, naming the call and the server; on a
    watch ``stream``, so does a line that is not a watch event (a proxy's garbage, a cut)."""
    at, asked = described(verb, plural, name, server)
    try:
        yield
    except ApiError:
        raise
    except Refused as err:
        status = status_object(err.head, err.body)
        code = err.head.status
        if status is None:
            raise not_a_status(at, code, err.head.reason, asked) from None
        said, code, reason = status_said(status, code)
        details = status.get("details")
        details = details if isinstance(details, Mapping) else None
        raise ApiError(f"{at}: {said}", status=code, reason=reason, details=details,
                       **asked) from None  # fmt: skip
    except EventError as err:  # no HTTP answer of its own: the event's Status says it all
        said, code, reason = status_said(err.status, 0)
        raise ApiError(f"{at}: {said}", status=code, reason=reason, **asked) from None
    except CredentialError as err:
        raise ApiError(f"{at}: no credentials: {err}", **asked) from None
    except ProtocolError as err:  # an answer, but none this client reads (too large, garbled)
        raise ApiError(f"{at}: no usable answer ({err})", reason=UNREACHABLE,
                       **asked) from err  # fmt: skip
    # Before ValueError: a certificate refused (SSLCertVerificationError) is both.
    except (OSError, EOFError, asyncio.LimitOverrunError) as err:
        raise ApiError(f"{at}: API server not reachable ({_unreachable(err)})",
                       reason=UNREACHABLE, **asked) from err  # fmt: skip
    except (ValueError, KeyError, TypeError) as err:
        what_broke = "event" if stream else "answer"
        raise ApiError(f"{at}: undecodable {what_broke} ({type(err).__name__}: {err})",
                       **asked) from err  # fmt: skip
