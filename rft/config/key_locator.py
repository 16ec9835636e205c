"""Finding the line of a config key in the YAML text, so errors can say `file:line`.

`KeyLocator` composes the YAML node tree once (no values are built) and maps dotted key paths such
as `buffer.explorer_input.eval_tasksets[0].name` to 1-based line numbers.
"""

from __future__ import annotations

import re

import yaml

_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


class KeyLocator:
    """Maps dotted key paths of one YAML document to the lines where they are written."""

    def __init__(self, text: str) -> None:
        try:
            self._root: yaml.Node | None = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError:
            self._root = None

    def line_of(self, path: str) -> int | None:
        """The 1-based line of the deepest part of `path` that the document contains, or None."""
        node = self._root
        line: int | None = None
        for name, index in _PART.findall(path):
            if isinstance(node, yaml.MappingNode) and name:
                match = next((kv for kv in node.value if _scalar(kv[0]) == name), None)
                if match is None:
                    return line
                line = match[0].start_mark.line + 1
                node = match[1]
            elif isinstance(node, yaml.SequenceNode) and index:
                position = int(index)
                if position >= len(node.value):
                    return line
                node = node.value[position]
                line = node.start_mark.line + 1
            else:
                return line
        return line


def _scalar(node: yaml.Node) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None
