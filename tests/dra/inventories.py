"""Inventories for the DRA tests: the checked-in fixture trees and trees built on the spot."""

from __future__ import annotations

import re
from pathlib import Path

from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.discovery.scan import scan

FIXTURES = Path(__file__).resolve().parents[2] / "sysfs_fixtures"

# The API server's own name rules (k8s.io/apimachinery validation), restated for checking.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def fixture_inventory(name: str) -> Inventory:
    """Discovery's answer for a checked-in tree of sysfs_fixtures/."""
    return scan(FIXTURES / name / "sys", FIXTURES / name / "dev")


def tree_inventory(root: Path) -> Inventory:
    """Discovery's answer for a tree built under ``root``."""
    return scan(root / "sys", root / "dev")
