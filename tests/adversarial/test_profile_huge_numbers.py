"""A profile integer of thousands of digits is a profile error at file:line:col, for every command that reads profiles.

Python refuses to convert more than 4300 decimal digits to an int (``sys.get_int_max_str_digits``)
and PyYAML let that ValueError escape as a traceback (exit 1) from validate, hash, matrix, plan,
compile and cache-lookup. A hex integer of thousands of digits converts, then breaks whatever prints
it in decimal. Every integer beyond 64 bits is now refused where it is read, with its position.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _bundles import neuronc, text

COMMANDS = ["validate", "hash", "matrix", "plan", "compile", "cache-lookup"]
HUGE = {
    "decimal": "9" * 5000,
    "negative": "-" + "9" * 5000,
    "hex": "0x" + "f" * 5000,
    "below-the-limit": "9" * 4000,
}


def _profile(tmp_path: Path, line: str) -> Path:
    path = tmp_path / "huge.yaml"
    path.write_text(f"model: {{id: ./model}}\nbackend: inductor\ntarget: cpu\nsequence: {{max_length: 64}}\n{line}\n")
    return path


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("number", list(HUGE), ids=list(HUGE))
def test_a_huge_integer_is_a_profile_error_with_its_position(tmp_path: Path, command: str, number: str) -> None:
    profile = _profile(tmp_path, f"batch_size: {HUGE[number]}")
    proc = neuronc(command, profile, "--json", cwd=tmp_path)
    said = text(proc)  # with --json, some commands put the problems in the document, not on stderr
    assert proc.returncode == 2, said
    assert "Traceback" not in said
    assert f"{profile.name}:5:" in said and "batch_size" in said, said
    assert all(len(line) < 400 for line in said.splitlines()), "the number is shown shortened"
    json.loads(proc.stdout)  # one document


@pytest.mark.parametrize("where", ["matrix: {batch_size: [1, NUM]}", "options: {inductor_config: {x: NUM}}"])
def test_a_huge_integer_anywhere_in_the_profile(tmp_path: Path, where: str) -> None:
    profile = _profile(tmp_path, where.replace("NUM", HUGE["decimal"]))
    proc = neuronc("validate", profile, cwd=tmp_path)
    assert proc.returncode == 2, text(proc)
    assert "Traceback" not in proc.stderr.decode()
    assert f"{profile.name}:5:" in proc.stderr.decode()
