"""The kubelet's DRAPlugin service, v1 and v1beta1, over the prepare core.

The two versions carry the same messages but for ``Device.share_id`` (v1 only), so one pair
of converters serves both. Every claim the kubelet names gets an entry in the answer, a failed
claim with its error; an unexpected failure of ours (a bug) is logged with its traceback and
answered as every claim's error, so the kubelet retries them rather than giving up the call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, cast

import grpc

from kae_deviceplugin.dra.api import dra_v1, dra_v1_grpc, dra_v1beta1, dra_v1beta1_grpc
from kae_deviceplugin.dra.claim_specs import ClaimAnswer
from kae_deviceplugin.dra.claims import ClaimRef
from kae_deviceplugin.errors import TEXT_LIMIT, KaeDevicePluginError, cause, clipped

log = logging.getLogger(__name__)

# Called once a prepare or unprepare call is over (its answer sent, or the caller gone): work
# that follows a call, such as the claims' status, waits for it and never delays the answer.
Answered = Callable[[], None]


class Preparer(Protocol):
    """What the servicers call: dra.prepare.ClaimPreparer."""

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimAnswer]: ...

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]: ...


def claim_refs(claims: Iterable[Any]) -> list[ClaimRef]:
    """The kubelet's Claim messages as references (the same in both versions)."""
    return [ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]


def _device(pb: Any, answer: Any, with_share: bool) -> Any:
    result = answer.result
    fields: dict[str, Any] = {
        "request_names": [result.request],
        "pool_name": result.pool,
        "device_name": result.device,
        "cdi_device_ids": list(answer.cdi_ids),
    }
    if with_share and result.share_id is not None:
        fields["share_id"] = result.share_id
    return pb.Device(**fields)


def prepare_response(pb: Any, answers: Mapping[str, ClaimAnswer], *, with_share: bool) -> Any:
    """A NodePrepareResourcesResponse of module ``pb`` for ``answers`` by claim UID."""
    response = pb.NodePrepareResourcesResponse()
    for uid, answer in answers.items():
        entry = response.claims[uid]
        entry.error = answer.error
        entry.devices.extend(_device(pb, d, with_share) for d in answer.devices)
    return response


def unprepare_response(pb: Any, errors: Mapping[str, str]) -> Any:
    response = pb.NodeUnprepareResourcesResponse()
    for uid, error in errors.items():
        response.claims[uid].error = error
    return response


# Failures of the node, not bugs: the checkpoint cannot be read or locked in time, a file is
# in the way. One line each; the kubelet asks again.
_NODE_FAILURES = (KaeDevicePluginError, OSError, TimeoutError)


async def _prepared(preparer: Preparer, refs: list[ClaimRef]) -> dict[str, ClaimAnswer]:
    try:
        return await preparer.prepare(refs)
    except _NODE_FAILURES as err:
        log.warning("NodePrepareResources failed: %s", clipped(cause(err), TEXT_LIMIT))
        return {r.uid: ClaimAnswer(error=cause(err)) for r in refs}
    except Exception as err:
        log.exception("NodePrepareResources failed")
        return {r.uid: ClaimAnswer(error=f"internal error: {err!r}") for r in refs}


async def _unprepared(preparer: Preparer, refs: list[ClaimRef]) -> dict[str, str]:
    try:
        return await preparer.unprepare(refs)
    except _NODE_FAILURES as err:
        log.warning("NodeUnprepareResources failed: %s", clipped(cause(err), TEXT_LIMIT))
        return {r.uid: cause(err) for r in refs}
    except Exception as err:
        log.exception("NodeUnprepareResources failed")
        return {r.uid: f"internal error: {err!r}" for r in refs}


def _after_answer(context: grpc.aio.ServicerContext[Any, Any], answered: Answered) -> None:
    """Call ``answered`` once the call is over: its answer sent, or the kubelet gone."""
    # The stubs' DoneCallback is a class, not a protocol: any callable of the context fits.
    done = cast("grpc.aio.DoneCallback[Any, Any]", lambda _context: answered())
    context.add_done_callback(done)


class DRAPluginV1(dra_v1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``."""

    def __init__(self, preparer: Preparer, answered: Answered = lambda: None) -> None:
        self.preparer = preparer
        self.answered = answered

    async def NodePrepareResources(
        self,
        request: dra_v1.NodePrepareResourcesRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> dra_v1.NodePrepareResourcesResponse:
        _after_answer(context, self.answered)
        answers = await _prepared(self.preparer, claim_refs(request.claims))
        response: dra_v1.NodePrepareResourcesResponse = prepare_response(
            dra_v1, answers, with_share=True
        )
        return response

    async def NodeUnprepareResources(
        self,
        request: dra_v1.NodeUnprepareResourcesRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> dra_v1.NodeUnprepareResourcesResponse:
        _after_answer(context, self.answered)
        errors = await _unprepared(self.preparer, claim_refs(request.claims))
        response: dra_v1.NodeUnprepareResourcesResponse = unprepare_response(dra_v1, errors)
        return response


class DRAPluginV1beta1(dra_v1beta1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin``: v1 without share IDs."""

    def __init__(self, preparer: Preparer, answered: Answered = lambda: None) -> None:
        self.preparer = preparer
        self.answered = answered

    async def NodePrepareResources(
        self,
        request: dra_v1beta1.NodePrepareResourcesRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> dra_v1beta1.NodePrepareResourcesResponse:
        _after_answer(context, self.answered)
        answers = await _prepared(self.preparer, claim_refs(request.claims))
        response: dra_v1beta1.NodePrepareResourcesResponse = prepare_response(
            dra_v1beta1, answers, with_share=False
        )
        return response

    async def NodeUnprepareResources(
        self,
        request: dra_v1beta1.NodeUnprepareResourcesRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> dra_v1beta1.NodeUnprepareResourcesResponse:
        _after_answer(context, self.answered)
        errors = await _unprepared(self.preparer, claim_refs(request.claims))
        response: dra_v1beta1.NodeUnprepareResourcesResponse = unprepare_response(
            dra_v1beta1, errors
        )
        return response


def add_plugin_servicers(
    server: grpc.aio.Server, preparer: Preparer, answered: Answered = lambda: None
) -> None:
    """Serve both DRAPlugin versions on ``server`` (the kubelet picks the newest it knows);
    ``answered`` is called after every prepare and unprepare call, once it is over."""
    dra_v1_grpc.add_DRAPluginServicer_to_server(DRAPluginV1(preparer, answered), server)
    dra_v1beta1_grpc.add_DRAPluginServicer_to_server(DRAPluginV1beta1(preparer, answered), server)
