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
    """``text`` with ``sequence.<key>`` set to each list of ``values`` (keys: context_buckets, token_buckets).

    Only the numbers change: an item keeps its place, so a comment beside it or between items stays;
    items beyond the new list are removed (their lines, for a block list), new ones added after the
    last; an anchor on a list stays on it (``&b [16, 32]``), and a key whose value is an alias of
    another list (``token_buckets: *b``) gets a list of its own. Lines added end as the file's do (CRLF
    or LF).
    """
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(root, yaml.MappingNode):
        raise InvalidInputError(f"{filename}: not a profile mapping")
    _refuse_matrix_buckets(root, filename)
    sequence = _value(root, "sequence")
    if not isinstance(sequence, yaml.MappingNode):
        raise InvalidInputError(f"{filename}: sequence: expected a mapping")
    newline = "\r\n" if "\r\n" in text else "\n"
    edits: list[tuple[int, int, str]] = []
    missing: list[str] = []
    for key, buckets in values.items():
        numbers = [str(int(b)) for b in buckets]
        flow = "[" + ", ".join(numbers) + "]"
        found = _entry(sequence, key)
        if found is None:
            missing.append(f"{key}: {flow}")
            continue
        key_node, node = found
        alias = _alias_at(text, key_node.end_mark.index)
        if alias is not None:  # the list is another key's (``*b``): this key gets its own
            edits.append((alias[0], alias[1], flow))
        elif (
            isinstance(node, yaml.SequenceNode)
            and node.value
            and all(isinstance(item, yaml.ScalarNode) for item in node.value)
        ):
            edits.extend(_item_edits(text, node, numbers, newline))
        else:  # a scalar (``auto``) or an empty list: the whole value, keeping an anchor or a tag
            edits.append(
                (_after_properties(text, node.start_mark.index, node.end_mark.index), node.end_mark.index, flow)
            )
    if missing:
        edits.append(_insertion(text, sequence, missing, newline))
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def _item_edits(text: str, node: yaml.SequenceNode, numbers: list[str], newline: str) -> list[tuple[int, int, str]]:
    """Edits that make the list's items ``numbers``, touching nothing else in it."""
    items = node.value
    edits = [
        (_after_properties(text, item.start_mark.index, item.end_mark.index), item.end_mark.index, number)
        for item, number in zip(items, numbers, strict=False)
    ]
    last = items[-1]
    if node.flow_style:
        if len(numbers) > len(items):  # after the last item, before any comment or the bracket
            edits.append((last.end_mark.index, last.end_mark.index, "".join(f", {n}" for n in numbers[len(items) :])))
        elif len(numbers) < len(items):  # from the end of the last kept item to the end of the last one
            edits.append((items[len(numbers) - 1].end_mark.index, last.end_mark.index, ""))
        return edits
    if len(numbers) > len(items):  # new lines after the last item's line (its comment stays with it)
        indent = " " * _column(text, last.start_mark.index)
        at = _line_end(text, last.end_mark.index)
        edits.append((at, at, "".join(f"{newline}{indent}- {n}" for n in numbers[len(items) :])))
    for item in items[len(numbers) :]:  # the whole line of each item dropped
        begin = text.rfind("\n", 0, item.start_mark.index) + 1
        end = _line_end(text, item.end_mark.index)
        end = min(len(text), end + len(newline)) if text.startswith(newline, end) else end
        edits.append((begin, end, ""))
    return edits


def _column(text: str, index: int) -> int:
    """The column of a block list's dash: where ``- `` starts on the item's line."""
    begin = text.rfind("\n", 0, index) + 1
    dash = text.rfind("-", begin, index)
    return (dash if dash >= 0 else index) - begin


def _line_end(text: str, index: int) -> int:
    """Where the line holding ``index`` ends: at its CR LF or LF (the file's length on the last line)."""
    at = text.find("\n", index)
    if at < 0:
        return len(text)
    return at - 1 if at > 0 and text[at - 1] == "\r" else at


def _after_properties(text: str, start: int, end: int) -> int:
    """The start of a value past its anchor (``&name``) and tag (``!!seq``), which the edit keeps."""
    while start < end and text[start] in "&!":
        while start < end and not text[start].isspace():
            start += 1
        while start < end and text[start] in " \t":
            start += 1
    return start


def _alias_at(text: str, key_end: int) -> tuple[int, int] | None:
    """The span of ``*name`` when the value after the key ending at ``key_end`` is an alias."""
    at = key_end
    while at < len(text) and text[at] in " \t":
        at += 1
    if at >= len(text) or text[at] != ":":
        return None
    at += 1
    while at < len(text) and text[at] in " \t":
        at += 1
    if at >= len(text) or text[at] != "*":
        return None
    end = at
    while end < len(text) and not text[end].isspace() and text[end] not in ",]}":
        end += 1
    return at, end


def _entry(mapping: yaml.MappingNode, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    for key_node, value_node in mapping.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return key_node, value_node
    return None


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


def _insertion(text: str, sequence: yaml.MappingNode, lines: list[str], newline: str) -> tuple[int, int, str]:
    """Where and what to add for keys ``sequence:`` does not have."""
    if sequence.flow_style:
        end = sequence.end_mark.index - 1  # before the closing brace
        return end, end, "".join(f", {line}" for line in lines)
    last_key, last_value = sequence.value[-1]
    indent = " " * last_key.start_mark.column
    end = last_value.end_mark.index
    at = _line_end(text, end)
    if last_value.end_mark.column == 0 and end > 0:  # a block value ends at the next line's start
        at = end - len(newline) if text[:end].endswith(newline) else end - 1
    return at, at, "".join(f"{newline}{indent}{line}" for line in lines)


def write_buckets(path: str | os.PathLike[str], context: Sequence[int], token: Sequence[int]) -> str:
    """Rewrite the profile at ``path`` in place; return the new text. The profile must load before
    and after, and after with exactly these buckets in every build."""
    from neuronc.fsutil import read_bytes_limited
    from neuronc.profile import MAX_PROFILE_BYTES, parse_profile, write_profile

    p = Path(path)
    # The text as it is (newline="" semantics): CRLF line ends are kept, not turned into LF.
    text = read_bytes_limited(p, MAX_PROFILE_BYTES, what="profile").decode("utf-8")
    new = set_buckets(text, {"context_buckets": list(context), "token_buckets": list(token)}, str(path))
    loaded = parse_profile(new, str(path), base_dir=p.parent)
    for spec in loaded.specs:
        if spec.sequence.context_buckets != tuple(context) or spec.sequence.token_buckets != tuple(token):
            raise AssertionError(f"{path}: the edited profile does not hold the buckets written")  # a bug
    write_profile(new, p, hint="leave out --write and edit the profile by hand")
    return new


__all__ = ["KEYS", "set_buckets", "write_buckets"]
