"""The YAML loader of configuration files, apart so that PyYAML is only loaded with a file."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import yaml


class StrictLoader(yaml.SafeLoader):
    """The safe loader, refusing duplicate keys, of which plain YAML silently keeps the last."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            if (key_node.tag, key_node.value) in seen:
                problem = f"found duplicate key {key_node.value!r}"
                raise yaml.constructor.ConstructorError(None, None, problem, key_node.start_mark)
            seen.add((key_node.tag, key_node.value))
        return super().construct_mapping(node, deep=deep)
