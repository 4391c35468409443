"""Validate the custom resources in rendered manifests against deploy/schemas/<kind>.json.

kubernetes-validate knows only built-in kinds and merely warns about others, so a broken
NodeFeatureRule or ServiceMonitor would pass it. This checks every object whose kind has a schema
here, and fails on any object that neither kubernetes-validate nor a schema here covers, so a new
kind cannot slip through unvalidated.

Usage: python scripts/check_custom_resources.py FILE... (exit 0 clean, 1 on any finding).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # ships no type information
import yaml
from kubernetes_validate import utils as kv  # type: ignore[import-untyped]  # ditto

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "deploy" / "schemas"


def load_schemas() -> dict[str, Any]:
    """Map a lower-case kind to its JSON schema."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(SCHEMA_DIR.glob("*.json"))}


def known_to_kubernetes_validate(obj: dict[str, Any]) -> bool:
    """Whether kubernetes-validate has a schema for this object's kind at its newest version."""
    try:
        kv.validate(obj, kv.latest_version(), strict=True)
    except kv.SchemaNotFoundError:
        return False
    except kv.ValidationError:
        return True  # known kind; the kubernetes-validate run reports the error itself
    return True


def check_object(obj: dict[str, Any], schemas: dict[str, Any]) -> list[str]:
    """Every finding for one object, each naming the field path."""
    kind = str(obj.get("kind", ""))
    name = str(obj.get("metadata", {}).get("name", "?"))
    schema = schemas.get(kind.lower())
    if schema is None:
        if known_to_kubernetes_validate(obj):
            return []
        return [f"{kind}/{name}: no schema in {SCHEMA_DIR} and unknown to kubernetes-validate"]
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
    return [
        f"{kind}/{name}: {'.'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
        for err in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
    ]


def main(argv: list[str]) -> int:
    """Check every document of every file given; print one line per finding."""
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    schemas = load_schemas()
    findings: list[str] = []
    checked = 0
    for path in argv:
        for obj in yaml.safe_load_all(Path(path).read_text()):
            if not obj:
                continue
            if not isinstance(obj, dict):
                findings.append(f"{path}: a document is not a mapping")
                continue
            checked += 1
            findings.extend(f"{path}: {f}" for f in check_object(obj, schemas))
    for finding in findings:
        print(f"ERROR {finding}")
    print(f"check_custom_resources: {checked} objects, {len(findings)} findings")
    return 1 if findings or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
