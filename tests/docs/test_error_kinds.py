"""docs/exit-codes.md lists every error kind the package can raise, with its exit code and class."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from pathlib import Path

import pytest
from _schemas import assert_conforms

import neuronc
from neuronc.errors import NeuroncError

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "exit-codes.md"


def _all_error_classes() -> list[type[NeuroncError]]:
    """Every NeuroncError subclass defined anywhere in the package (every module imported first)."""
    for module in pkgutil.walk_packages(neuronc.__path__, "neuronc."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found: list[type[NeuroncError]] = [NeuroncError]
    stack = [NeuroncError]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub.__module__.startswith("neuronc.") and sub not in found:
                found.append(sub)
                stack.append(sub)
    return found


def _documented() -> dict[str, tuple[int, str]]:
    """The "Error kinds" table: kind → (exit code, class name)."""
    section = PAGE.read_text(encoding="utf-8").split("## Error kinds", 1)[1]
    rows = re.findall(r"^\| `([a-z_]+)` \| (\d+) \| `(\w+)`", section, flags=re.MULTILINE)
    return {kind: (int(code), cls) for kind, code, cls in rows}


def test_every_error_kind_is_documented_with_its_exit_code_and_class() -> None:
    documented = _documented()
    actual = {cls.kind: (cls.exit_code, cls.__name__) for cls in _all_error_classes() if "kind" in vars(cls)}
    missing = {k: v for k, v in actual.items() if k not in documented}
    stale = {k: v for k, v in documented.items() if k not in actual}
    wrong = {k: (documented[k], v) for k, v in actual.items() if k in documented and documented[k] != v}
    assert not missing, f"error kinds missing from the 'Error kinds' table of docs/exit-codes.md: {missing}"
    assert not stale, f"docs/exit-codes.md documents kinds no class raises: {stale}"
    assert not wrong, f"docs/exit-codes.md disagrees with the classes (documented, actual): {wrong}"


def test_every_exit_code_an_error_can_have_is_in_the_table() -> None:
    text = PAGE.read_text(encoding="utf-8").split("## The rule", 1)[0]
    codes = {int(c) for c in re.findall(r"^\| (\d+) \|", text, flags=re.MULTILINE)}
    assert {cls.exit_code for cls in _all_error_classes()} | {0} <= codes


def test_the_error_schema_names_every_exit_code() -> None:
    schema = json.loads((ROOT / "docs" / "schemas" / "error.schema.json").read_text())
    assert set(schema["properties"]["exit_code"]["enum"]) == {cls.exit_code for cls in _all_error_classes()}


@pytest.mark.parametrize("cls", _all_error_classes(), ids=lambda c: c.kind)
def test_every_error_class_serialises_to_the_documented_error_object(cls: type[NeuroncError]) -> None:
    error = NeuroncError.__new__(cls)
    NeuroncError.__init__(error, "m", hint="h", details=["d"])
    for name in ("log_path", "report"):  # the extra fields of CompileError and AccuracyError
        if not hasattr(error, name):
            setattr(error, name, {} if name == "report" else None)
    assert_conforms("error", json.loads(json.dumps(error.to_json())), f"{cls.__name__}.to_json()")


def test_ctrl_c_with_json_prints_the_interrupted_error_document(capsys: pytest.CaptureFixture[str]) -> None:
    from neuronc.cli import _cli as cli
    from neuronc.cli._app import handle_errors

    @handle_errors
    def interrupted(json_out: bool = False) -> None:
        raise KeyboardInterrupt

    with pytest.raises(cli.Exit) as exit_info:
        interrupted(json_out=True)
    assert exit_info.value.exit_code == 130
    document = json.loads(capsys.readouterr().out)
    assert_conforms("error", document)
    assert document["error"] == "interrupted" and document["exit_code"] == 130
