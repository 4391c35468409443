"""A seeded test API server for each kubectl plugin test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kubectl.cluster import seed_cluster
from tests.support.http_apiserver import HttpApiServer


@pytest.fixture
def api() -> Iterator[HttpApiServer]:
    """The HTTP test API server holding ``seed_cluster``'s objects."""
    with HttpApiServer() as server:
        seed_cluster(server)
        yield server
