"""--json is one valid UTF-8 JSON document whatever bytes appear in file names (issue 16).

File names that are not UTF-8 reach Python as lone surrogates (PEP 383); every command that
echoes a path must still print valid UTF-8 JSON on stdout and words (not a traceback) on stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BAD = os.fsdecode(b"bad-\xff\xfe-name")


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "NEURONC_STORE": str(cwd / "store"), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "neuronc", *map(str, args)], capture_output=True, env=env, cwd=cwd)


@pytest.mark.parametrize(
    "command",
    [
        ["inspect", "{dir}", "--json"],
        ["verify", "{dir}", "--json"],
        ["validate", "{profile}", "--json"],
        ["compile", "{profile}", "--json"],
        ["plan", "{profile}", "--json"],
        ["hash", "{profile}", "--json"],
        ["store", "list", "--store", "{dir}", "--json"],
    ],
)
def test_json_is_valid_utf8_whatever_the_file_names(tmp_path: Path, command: list[str]) -> None:
    directory = tmp_path / BAD
    directory.mkdir()
    profile = directory / f"{BAD}.yaml"
    profile.write_text("model: {id: ./nowhere}\nbackend: inductor\ntarget: cpu\nsequence: {max_length: 64}\n")
    args = [a.replace("{dir}", str(directory)).replace("{profile}", str(profile)) for a in command]
    proc = run(*args, cwd=tmp_path)
    assert b"Traceback" not in proc.stderr, proc.stderr.decode("utf-8", "replace")
    assert proc.returncode in (0, 2, 4, 5, 6), proc.stderr.decode("utf-8", "replace")
    text = proc.stdout.decode("utf-8")  # strict: raises on invalid UTF-8
    json.loads(text)  # exactly one document
    proc.stderr.decode("utf-8")
