"""Logging set-up: readable text for people, one JSON object per line for log pipelines."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Final

from kae_deviceplugin.config.settings import LOG_FORMATS, LOG_LEVELS

LEVELS: Final = LOG_LEVELS
FORMATS: Final = LOG_FORMATS


class JsonFormatter(logging.Formatter):
    """One JSON object per record, with the fields log pipelines index on."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(level: str = "info", fmt: str = "text") -> None:
    """Route the root logger to stderr in the chosen format, replacing earlier handlers."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # grpc logs every event-loop lookup at DEBUG; ours are the lines worth reading.
    logging.getLogger("grpc").setLevel(max(root.level, logging.INFO))
