"""YAML turned into plain data with the position of every key and value (for ``file:line:col`` errors)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from neuronc.errors import safe_text

# Integers beyond this are refused where they are read: no profile field needs more, and Python will not
# print (or parse) more than 4300 decimal digits.
MAX_INT_BITS = 64
# YAML aliases can make a tiny file expand exponentially ("billion laughs"); cap the node count.
MAX_YAML_NODES = 20_000

Position = tuple[int, int]  # 1-based line, column
# Plain YAML only: the core schema's tags. Python tags (tag:yaml.org,2002:python/...) are refused.
_ALLOWED_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}" for name in ("map", "seq", "str", "int", "float", "bool", "null", "merge", "timestamp")
)


class TooLarge(Exception):
    """The document expands to more than MAX_YAML_NODES nodes."""


class YamlTree:
    """A YAML document as plain data, with the position of every key and value.

    ``problems`` collects what was refused while loading (tags, non-scalar keys, duplicate keys);
    ``refused`` holds the paths of values that were dropped, so later checks do not report them
    again as missing or ``None``.
    """

    def __init__(self, filename: str, *, max_nodes: int = MAX_YAML_NODES) -> None:
        self.filename = filename
        self.max_nodes = max_nodes
        self.key_pos: dict[tuple[Any, ...], Position] = {}
        self.value_pos: dict[tuple[Any, ...], Position] = {}
        self.problems: list[str] = []
        self.refused: set[tuple[Any, ...]] = set()
        self._nodes = 0

    def load(self, text: str) -> Any:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            return self._walk(loader, node, ())
        finally:
            loader.dispose()

    def _walk(self, loader: yaml.SafeLoader, node: yaml.Node, path: tuple[Any, ...]) -> Any:
        self._nodes += 1
        if self._nodes > self.max_nodes:
            msg = f"more than {self.max_nodes} YAML nodes (aliases expanding?)"
            raise TooLarge(msg)
        self.value_pos[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if node.tag not in _ALLOWED_TAGS:
            self.problems.append(self.at(path, f"YAML tag '{node.tag}' is not allowed (plain YAML only)", node))
            self.refused.add(path)
            return None
        if isinstance(node, yaml.MappingNode):
            result: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = self._scalar(loader, key_node, path)
                if not isinstance(key, str | int | float | bool) or key is None:
                    self.problems.append(self.at(path, f"keys must be plain scalars, got {key!r}", key_node))
                    continue
                if key in result:
                    first = self.key_pos.get((*path, key), (0, 0))
                    message = f"duplicate key '{key}' (first defined on line {first[0]})"
                    self.problems.append(self.at((*path, key), message, key_node))
                    continue
                self.key_pos[(*path, key)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                result[key] = self._walk(loader, value_node, (*path, key))
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self._walk(loader, child, (*path, i)) for i, child in enumerate(node.value)]
        return self._scalar(loader, node, path)

    def _scalar(self, loader: yaml.SafeLoader, node: yaml.Node, path: tuple[Any, ...]) -> Any:
        """A scalar's value; a problem (and None) where PyYAML cannot make one, or makes an absurd integer.

        An integer of thousands of digits is the case in point: Python refuses to convert more than
        ``sys.get_int_max_str_digits()`` (4300) decimal digits, and PyYAML lets that ValueError
        escape; one given in hex converts, and then breaks whatever prints it in decimal. No profile
        field holds more than 64 bits.
        """
        text = node.value if isinstance(node.value, str) else ""
        try:
            value = loader.construct_object(node, deep=True)
        except (ValueError, yaml.YAMLError) as exc:
            why = "an integer too large" if len(text) > 64 else f"not a valid value ({safe_text(exc, 120)})"
        else:
            if not (isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS):
                return value
            why = "an integer too large"
        self.problems.append(self.at(path, f"{why}: {safe_text(text, 24)} ({len(text)} characters)", node))
        self.refused.add(path)
        return None

    def is_refused(self, path: Sequence[Any]) -> bool:
        """Whether ``path`` or a parent of it was dropped while loading (already reported)."""
        p = tuple(path)
        return any(p[: len(r)] == r for r in self.refused)

    def position(self, path: Sequence[Any]) -> Position:
        """Best position for a field path: the key if present, else its nearest present parent."""
        p = tuple(path)
        while p:
            if p in self.key_pos:
                return self.key_pos[p]
            if p in self.value_pos:
                return self.value_pos[p]
            p = p[:-1]
        return self.value_pos.get((), (1, 1))

    def at(self, path: Sequence[Any], message: str, node: yaml.Node | None = None) -> str:
        if node is not None:
            line, col = node.start_mark.line + 1, node.start_mark.column + 1
        else:
            line, col = self.position(path)
        return f"{self.filename}:{line}:{col}: {format_path(path) or '<root>'}: {message}"


def format_path(path: Sequence[Any]) -> str:
    """``sequence.context_buckets[2]`` for ``("sequence", "context_buckets", 2)``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text
