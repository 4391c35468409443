"""A helper of the API-client tests: the ``ApiError`` a call ends in."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import pytest

from kae_deviceplugin.errors import ApiError


async def refused(call: Awaitable[Any]) -> ApiError:
    """The ``ApiError`` ``call`` raises (the test fails if it raises none)."""
    with pytest.raises(ApiError) as caught:
        await call
    return caught.value
