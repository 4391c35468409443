"""An API server that refuses, fails or has no DRA, met by the real client over HTTP: every
message names the server's URL and, where the answer tells one, the fix (the ClusterRole's
verbs for a 403, "DRA needs Kubernetes 1.34+" for a 404 on the DRA kinds); ``doctor`` says it
in its row, ``serve`` in its log and ``/readyz``, whichever part of the driver met it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from kae_deviceplugin.apiserver.hints import (
    NO_DRA_FIX,
    RBAC_FIX,
    SERVER_FAILED_FIX,
    UNREACHABLE_FIX,
    hint,
    with_hint,
)
from kae_deviceplugin.apiserver.http1 import Head
from kae_deviceplugin.apiserver.rest_errors import EventError, Refused, translated
from kae_deviceplugin.cli.checks import Status
from kae_deviceplugin.cli.doctor_slices import check_slices
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.errors import UNREACHABLE, ApiError
from tests.support.dra_process import NODE, dra_node, dra_process
from tests.support.http_apiserver import HttpApiServer

FIXTURES = Path(__file__).resolve().parents[2] / "sysfs_fixtures"
TREE = FIXTURES / "kunpeng920-2p"
DEADLINE = 10.0


def doctor_row(api: HttpApiServer, tmp_path: Path) -> tuple[str, tuple[str, ...]]:
    """doctor's ``dra slices`` row against ``api``, through the real client: detail, fixes."""
    api.seed_node(NODE)
    inventory = scan(TREE / "sys", TREE / "dev")
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    [row] = check_slices(inventory, TREE / "sys", NODE, kubeconfig)
    assert row.status is Status.FAIL, row
    return row.detail, row.fixes


def test_doctor_on_an_api_server_without_dra_says_which_kubernetes_it_needs(
    api: HttpApiServer, tmp_path: Path
) -> None:
    """The list of resourceslices answers 404 (resource.k8s.io/v1 not served): the row names
    the server's URL and the fix is the Kubernetes version, not "is it reachable?"."""
    api.faults.refuse("list", code=404)
    detail, fixes = doctor_row(api, tmp_path)
    assert f"list resourceslices at {api.url}: " in detail and "HTTP 404 NotFound" in detail
    assert fixes == (NO_DRA_FIX,)
    assert "DRA needs Kubernetes 1.34+" in NO_DRA_FIX


def test_doctor_on_a_failing_api_server_shows_its_status_not_none(
    api: HttpApiServer, tmp_path: Path
) -> None:
    """A 500 on the list: the server's words and "HTTP 500 InternalError" (once "None"), its
    URL, and the fix to read its log."""
    api.faults.refuse("list", code=500)
    detail, fixes = doctor_row(api, tmp_path)
    assert f"at {api.url}: " in detail and "(HTTP 500 InternalError)" in detail
    assert "None" not in detail and fixes == (SERVER_FAILED_FIX,)


def test_doctor_on_a_403_gives_the_cluster_role(api: HttpApiServer, tmp_path: Path) -> None:
    """403 on the list, through the real client: the fix is the one table's verbs."""
    api.faults.refuse("list", code=403)
    detail, fixes = doctor_row(api, tmp_path)
    assert "HTTP 403 Forbidden" in detail and api.url in detail and fixes == (RBAC_FIX,)


def test_serve_on_a_403_logs_the_rbac_fix_for_the_node_and_the_slices(
    api: HttpApiServer,
) -> None:
    """serve --mode dra whose Node read is refused once and whose slice creates always are
    (RBAC, an admission policy): both log lines carry the server's URL and the ClusterRole's
    verbs, and /readyz names the refused slice with the same fix."""
    api.seed_node(NODE)
    api.faults.refuse("get", "nodes", code=403, times=1)
    api.faults.refuse("create", code=403)
    with dra_node() as node, dra_process(node, api) as daemon:
        assert daemon.wait_log("waiting for Node", DEADLINE), daemon.describe()
        [waiting] = [line for line in daemon.log_lines() if "waiting for Node" in line]
        assert f"get nodes/{NODE} at {api.url}: " in waiting and RBAC_FIX in waiting
        assert daemon.wait_log("not written", DEADLINE), daemon.describe()
        [refused, *_] = [line for line in daemon.log_lines() if "not written" in line]
        assert f"at {api.url}: " in refused and RBAC_FIX in refused, refused
        assert daemon.wait_for(lambda: RBAC_FIX in daemon.readyz()[1]), daemon.readyz()
        assert "Traceback" not in "\n".join(daemon.log_lines())


def test_serve_on_an_api_server_without_dra_says_so(api: HttpApiServer) -> None:
    """Every list of resourceslices answers 404: the daemon keeps serving, and its log and
    /readyz say the server does not serve resource.k8s.io/v1 and what DRA needs."""
    api.seed_node(NODE)
    api.faults.refuse("list", code=404)
    with dra_node() as node, dra_process(node, api) as daemon:
        assert daemon.wait_log(NO_DRA_FIX, DEADLINE), daemon.describe()
        assert daemon.wait_for(lambda: NO_DRA_FIX in daemon.readyz()[1]), daemon.readyz()
        assert daemon.alive and api.url in daemon.readyz()[1]


async def _raised(error: Exception, verb: str = "list") -> ApiError:
    """What ``translated`` makes of ``error`` raised inside a call ``verb resourceslices``."""
    with pytest.raises(ApiError) as caught:
        async with translated(verb, "resourceslices", None, "https://api.example:6443"):
            raise error
    return caught.value


def test_an_answer_that_is_no_status_object_keeps_its_code() -> None:
    """A proxy's plain-text 404 or 502 (no Status object) is that status, not "not
    reachable": a 404 on a list of slices still gets the DRA hint, a 502 the log hint."""

    def plain(code: int, phrase: str) -> Refused:
        return Refused(Head(code, phrase, {"content-type": "text/plain"}), b"page not found")

    not_found = asyncio.run(_raised(plain(404, "Not Found")))
    assert not_found.status == 404 and str(not_found).startswith(
        "list resourceslices at https://api.example:6443: HTTP 404 Not Found"
    )
    assert hint(not_found) == NO_DRA_FIX
    bad_gateway = asyncio.run(_raised(plain(502, "Bad Gateway"), verb="get"))
    assert bad_gateway.status == 502 and hint(bad_gateway) == SERVER_FAILED_FIX


def test_a_status_object_says_its_message_code_and_reason() -> None:
    """A JSON Status: "<message> (HTTP <code> <reason>)", with its code and reason kept."""
    status = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "no"}
    head = Head(403, "Forbidden", {"content-type": "application/json"})
    err = asyncio.run(_raised(Refused(head, json.dumps(status).encode()), verb="get"))
    assert str(err) == "get resourceslices at https://api.example:6443: no (HTTP 403 Forbidden)"
    assert (err.status, err.reason, hint(err)) == (403, "Forbidden", RBAC_FIX)


def test_no_connection_is_unreachable_with_its_hint() -> None:
    """A connection refused: status 0, reason Unreachable, the URL named, "is it reachable?"."""
    refused = ConnectionRefusedError(111, "Connection refused")
    err = asyncio.run(_raised(refused, verb="get"))
    assert (err.status, err.reason) == (0, UNREACHABLE)
    assert "not reachable (ConnectionRefusedError: Connection refused)" in str(err)
    assert with_hint(err).endswith(f"; {UNREACHABLE_FIX}") and "api.example:6443" in str(err)


@pytest.mark.parametrize(
    ("status", "verb", "resource", "expected"),
    [
        (403, "get", "nodes", RBAC_FIX),
        (404, "watch", "resourceslices", NO_DRA_FIX),
        (404, "create", "resourceslices", NO_DRA_FIX),
        (404, "get", "resourceclaims", None),  # a claim deleted: no missing API
        (404, "list", "nodes", None),  # not a DRA kind
        (409, "replace", "resourceslices", None),
        (429, "create", "resourceslices", None),
    ],
)
def test_the_hint_follows_the_status_and_what_was_asked(
    status: int, verb: str, resource: str, expected: str | None
) -> None:
    """A 404 is a missing API only for a list, watch or create of a DRA kind."""
    err = ApiError("refused", status=status, verb=verb, resource=resource)
    assert hint(err) == expected
    assert with_hint(err) == ("refused" if expected is None else f"refused; {expected}")


def test_a_status_without_a_message_reads_as_its_code() -> None:
    """A Status object with no message (a watch's ERROR event, a terse proxy): "HTTP 500
    InternalError" and the log hint, never "None"."""
    status = {"kind": "Status", "code": 500, "reason": "InternalError"}
    err = asyncio.run(_raised(EventError(status), verb="watch"))
    assert str(err) == "watch resourceslices at https://api.example:6443: HTTP 500 InternalError"
    assert (err.status, hint(err)) == (500, SERVER_FAILED_FIX)
