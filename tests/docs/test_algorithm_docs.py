"""The README's table of ``alg_*`` attributes per engine is the driver's: each engine's family
is the one every slice device carries, in publishing order, and each generation's column names
only algorithms of that family (the V2 column exactly the engine table's, which the fixture
trees list)."""

from __future__ import annotations

import re

from kae_deviceplugin.core.engines import ENGINES_BY_NAME
from kae_deviceplugin.dra.slice_devices import ALGORITHM_FAMILIES, algorithm_attribute
from tests.docs.markdown import read

BEGIN, END = "<!-- alg-families:begin -->", "<!-- alg-families:end -->"


def families_table(text: str) -> dict[str, list[list[str]]]:
    """Engine -> the code spans of each cell after the engine's, from the marked table."""
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    rows = {}
    for line in block.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = [re.findall(r"`([^`]+)`", cell) for cell in cells[1:]]
    return rows


def table_problems(text: str) -> list[str]:
    problems = []
    rows = families_table(text)
    if set(rows) != set(ALGORITHM_FAMILIES):
        problems.append(f"engines {sorted(rows)}, the driver has {sorted(ALGORITHM_FAMILIES)}")
    for engine, family in ALGORITHM_FAMILIES.items():
        if engine not in rows:
            continue
        attributes, v2, v3 = rows[engine]
        published = [algorithm_attribute(a) for a in family]
        if attributes != published:
            problems.append(f"{engine}: the README says {attributes}, slices carry {published}")
        if v2 != list(ENGINES_BY_NAME[engine].algorithms):
            problems.append(f"{engine}: V2 lists {list(ENGINES_BY_NAME[engine].algorithms)}")
        if stray := [a for a in v3 if a not in family]:
            problems.append(f"{engine}: V3 names {stray}, outside the family")
    return problems


def test_the_readme_alg_table_is_the_drivers_vocabulary() -> None:
    """A family changed in slice_devices.py fails here until the README's table follows."""
    problems = table_problems(read("README.md"))
    assert not problems, "\n".join(problems)


def test_the_alg_table_check_can_fail() -> None:
    """A family missing a name, and a V3 name outside the family, are caught."""
    text = (
        f"{BEGIN}\n| engine | family | V2 | V3 |\n|---|---|---|---|\n"
        "| hpre | `alg_rsa`, `alg_dh` | `rsa`, `dh` | `rsa`, `ed25519` |\n"
        "| sec | `alg_cipher`, `alg_digest`, `alg_aead` | `cipher`, `digest`, `aead` | |\n"
        "| zip | `alg_zlib`, `alg_gzip`, `alg_deflate`, `alg_lz77_zstd`, `alg_lz77_only`, "
        "`alg_lz4` | `zlib`, `gzip` | `deflate` |\n"
        f"{END}\n"
    )
    problems = table_problems(text)
    assert len(problems) == 2, problems
    assert problems[0].startswith("hpre: the README says ['alg_rsa', 'alg_dh'], slices carry")
    assert problems[1] == "hpre: V3 names ['ed25519'], outside the family"
