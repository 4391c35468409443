"""Fixtures of the tests that run the real DRA daemon against the HTTP test API server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.dra_process import DraNode, dra_node
from tests.support.http_apiserver import HttpApiServer


@pytest.fixture
def api() -> Iterator[HttpApiServer]:
    """A test API server over real HTTP, stopped after the test."""
    with HttpApiServer() as server:
        yield server


@pytest.fixture
def node() -> Iterator[DraNode]:
    """A fixture node (kunpeng920-2p) with its own kubelet root and CDI directory."""
    with dra_node() as built:
        yield built
