"""DRA selectors evaluated over published devices, as the scheduler sees them.

The device a selector sees: ``device.driver``, ``device.attributes[domain][name]`` and
``device.capacity[domain][name]`` (unqualified names in the driver's domain), and
``device.allowMultipleAllocations``. CEL comes from cel-python, an optional dependency (the
``kubectl`` extra): only ``why`` needs it, and the daemon never does. What it cannot do as the
API server's CEL does: capacities are plain numbers here (``quantity()`` and ``compareTo`` are
unknown: such a selector is reported as not evaluated), and optional chaining (``.?``) does not
parse; both are said, never guessed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kae_deviceplugin.kubectl.pool import PoolDevice

INSTALL_HINT = "pip install 'kae-deviceplugin[kubectl]'"


class CelUnavailable(Exception):
    """cel-python is not installed: ``why`` cannot evaluate selectors."""

    def __init__(self, cause: str) -> None:
        super().__init__(f"`why` needs the CEL library cel-python ({cause}): {INSTALL_HINT}")


def require_cel() -> None:
    """``CelUnavailable`` unless cel-python can be imported (checked before anything is read)."""
    try:
        import celpy  # noqa: F401, PLC0415
    except ImportError as err:
        raise CelUnavailable(str(err)) from None


@dataclass(frozen=True, slots=True)
class Verdict:
    """A selector on one device: passed, or the error the evaluation ended with."""

    passed: bool
    error: str | None = None


def cel_device(device: PoolDevice) -> dict[str, Any]:
    """The device as CEL variables: values by domain, then by name."""
    attributes: dict[str, dict[str, Any]] = {device.driver: {}}
    for name, value in device.attributes.items():
        domain, _, key = name.rpartition("/")
        attributes.setdefault(domain, {})[key] = value
    capacity: dict[str, dict[str, Any]] = {device.driver: {}}
    for name, amount in device.capacity.items():
        domain, _, key = name.rpartition("/")
        capacity.setdefault(domain, {})[key] = amount
    return {
        "driver": device.driver,
        "attributes": attributes,
        "capacity": capacity,
        "allowMultipleAllocations": device.shared,
    }


class Selector:
    """One CEL expression, compiled once; results cached by what the device shows (nodes of
    one model show the same devices, so a fleet costs few evaluations)."""

    def __init__(self, expression: str) -> None:
        try:
            import celpy  # noqa: PLC0415 (optional: only `why` loads it)
        except ImportError as err:
            raise CelUnavailable(str(err)) from None
        self.expression = expression
        self._cache: dict[str, Verdict] = {}
        self._program: Any = None
        self.unparsable: str | None = None
        environment = celpy.Environment()
        try:
            self._program = environment.program(environment.compile(expression))
        except Exception as err:  # cel-python raises its parse errors under several types
            self.unparsable = _first_line(err)

    def evaluate(self, device: PoolDevice) -> Verdict:
        if self.unparsable is not None:
            return Verdict(False, f"not parsed by cel-python: {self.unparsable}")
        variables = cel_device(device)
        key = json.dumps(variables, sort_keys=True, default=str)
        if key not in self._cache:
            self._cache[key] = self._run(variables)
        return self._cache[key]

    def _run(self, variables: Mapping[str, Any]) -> Verdict:
        from celpy import celtypes  # noqa: PLC0415
        from celpy.adapter import json_to_cel  # noqa: PLC0415

        try:
            result = self._program.evaluate({"device": json_to_cel(dict(variables))})
        except Exception as err:  # a runtime error: the scheduler fails the pod on it
            return Verdict(False, _first_line(err))
        if isinstance(result, Exception):
            return Verdict(False, _first_line(result))
        if not isinstance(result, celtypes.BoolType):
            return Verdict(False, f"gives {type(result).__name__}, not a bool")
        return Verdict(bool(result))


def _first_line(err: BaseException) -> str:
    text = str(err.args[0]) if err.args else str(err)
    return text.strip().splitlines()[0][:160] if text.strip() else type(err).__name__


class Selectors:
    """Selectors by expression, compiled once per run."""

    def __init__(self) -> None:
        self._compiled: dict[str, Selector] = {}

    def __getitem__(self, expression: str) -> Selector:
        if expression not in self._compiled:
            self._compiled[expression] = Selector(expression)
        return self._compiled[expression]
