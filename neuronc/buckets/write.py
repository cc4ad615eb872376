"""``neuronc buckets --write``: set a profile's bucket lists in place, keeping its comments and layout.

A targeted text edit, not a YAML round trip: PyYAML (neuronc's YAML library) drops comments when it
dumps, and ruamel.yaml, which keeps them, is not a dependency. PyYAML's composer gives every node its
start and end offsets in the text (``yaml.compose``, the same marks the profile loader reports
positions from); only the bucket values are replaced, by a flow list ``[a, b, c]`` where the value
was a flow list or a scalar (``auto``) and by a block list at the same indentation where it was a
block list. A missing key is added after the last key of ``sequence:``. The edited text is loaded
and validated again before it is written, and written atomically.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import yaml

from neuronc.errors import InvalidInputError

KEYS = ("context_buckets", "token_buckets")


def set_buckets(text: str, values: dict[str, Sequence[int]], filename: str = "<profile>") -> str:
    """``text`` with ``sequence.<key>`` set to each list of ``values`` (keys: context_buckets, token_buckets)."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(root, yaml.MappingNode):
        raise InvalidInputError(f"{filename}: not a profile mapping")
    _refuse_matrix_buckets(root, filename)
    sequence = _value(root, "sequence")
    if not isinstance(sequence, yaml.MappingNode):
        raise InvalidInputError(f"{filename}: sequence: expected a mapping")
    edits: list[tuple[int, int, str]] = []
    missing: list[str] = []
    for key, buckets in values.items():
        node = _value(sequence, key)
        flow = "[" + ", ".join(str(int(b)) for b in buckets) + "]"
        if node is None:
            missing.append(f"{key}: {flow}")
        elif isinstance(node, yaml.SequenceNode) and not node.flow_style and node.value:
            indent = " " * node.start_mark.column
            block = ("\n" + indent).join(f"- {int(b)}" for b in buckets)
            edits.append((node.start_mark.index, node.value[-1].end_mark.index, block))
        else:
            edits.append((node.start_mark.index, node.end_mark.index, flow))
    if missing:
        edits.append(_insertion(text, sequence, missing))
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def _value(mapping: yaml.MappingNode, key: str) -> yaml.Node | None:
    for key_node, value_node in mapping.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            found: yaml.Node = value_node
            return found
    return None


def _refuse_matrix_buckets(root: yaml.MappingNode, filename: str) -> None:
    matrix = _value(root, "matrix")
    if isinstance(matrix, yaml.MappingNode):
        for key_node, _ in matrix.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value in {f"sequence.{k}" for k in KEYS}:
                line = key_node.start_mark.line + 1
                what = "the matrix varies the buckets; --write cannot set one list"
                msg = f"{filename}:{line}: matrix.{key_node.value}: {what}"
                raise InvalidInputError(msg, hint="edit the matrix by hand with the suggested lists")


def _insertion(text: str, sequence: yaml.MappingNode, lines: list[str]) -> tuple[int, int, str]:
    """Where and what to add for keys ``sequence:`` does not have."""
    if sequence.flow_style:
        end = sequence.end_mark.index - 1  # before the closing brace
        return end, end, "".join(f", {line}" for line in lines)
    last_key, last_value = sequence.value[-1]
    indent = " " * last_key.start_mark.column
    end = last_value.end_mark.index
    newline = text.find("\n", end)
    at = len(text) if newline < 0 else newline
    if last_value.end_mark.column == 0 and end > 0:  # a block value ends at the next line's start
        at = end - 1
    return at, at, "".join(f"\n{indent}{line}" for line in lines)


def write_buckets(path: str | os.PathLike[str], context: Sequence[int], token: Sequence[int]) -> str:
    """Rewrite the profile at ``path`` in place; return the new text. The profile must load before
    and after, and after with exactly these buckets in every build."""
    from neuronc.fsutil import atomic_write_text
    from neuronc.profile import parse_profile

    p = Path(path)
    text = p.read_text(encoding="utf-8")
    new = set_buckets(text, {"context_buckets": list(context), "token_buckets": list(token)}, str(path))
    loaded = parse_profile(new, str(path), base_dir=p.parent)
    for build in loaded.builds:
        if build.sequence.context_buckets != tuple(context) or build.sequence.token_buckets != tuple(token):
            raise AssertionError(f"{path}: the edited profile does not hold the buckets written")  # a bug
    mode = p.stat().st_mode & 0o777
    atomic_write_text(p, new, mode=mode)
    return new


__all__ = ["KEYS", "set_buckets", "write_buckets"]
