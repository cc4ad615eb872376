"""Shell completion for bash, zsh and fish: Click's own, through `_NEURONC_COMPLETE` (README "Shell completion")."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _complete(instruction: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "neuronc"],
        env={**os.environ, "_NEURONC_COMPLETE": instruction, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("shell", "marker"),
    [("bash", "complete -o nosort -F"), ("zsh", "#compdef neuronc"), ("fish", "complete --no-files --command neuronc")],
)
def test_each_shell_gets_its_script(shell: str, marker: str) -> None:
    proc = _complete(f"{shell}_source")
    assert proc.returncode == 0, proc.stderr
    assert marker in proc.stdout and "_NEURONC_COMPLETE" in proc.stdout


def test_bash_completes_commands_subcommands_and_options() -> None:
    proc = _complete("bash_complete", COMP_WORDS="neuronc cache s", COMP_CWORD="2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["plain,status", "plain,synchronize"]
    proc = _complete("bash_complete", COMP_WORDS="neuronc compile --save", COMP_CWORD="2")
    assert proc.stdout.splitlines() == ["plain,--save-profile"]
