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


@pytest.mark.parametrize(
    ("instruction", "env", "named"),
    [
        ("bash_complete", {"COMP_WORDS": "neuronc cache s", "COMP_CWORD": "x"}, "COMP_CWORD"),
        ("bash_complete", {"COMP_WORDS": "neuronc cache s", "COMP_CWORD": "²"}, "COMP_CWORD"),
        ("bash_complete", {"COMP_WORDS": "neuronc cache s", "COMP_CWORD": "9" * 5000}, "COMP_CWORD"),
        ("zsh_complete", {"COMP_WORDS": "neuronc cache s", "COMP_CWORD": ""}, "COMP_CWORD"),
        ("bash_complete", {"COMP_CWORD": "1"}, "COMP_WORDS"),
        ("zsh_complete", {}, "COMP_WORDS"),
        ("fish_complete", {}, "COMP_WORDS"),
    ],
)
def test_a_malformed_completion_request_is_one_line_not_a_traceback(
    instruction: str, env: dict[str, str], named: str
) -> None:
    """A shell never sends these; a hand-made call (or a broken shell function) gets one error line, exit 2,
    and nothing on stdout for the shell to offer as a completion."""
    base = {k: v for k, v in os.environ.items() if k not in ("COMP_WORDS", "COMP_CWORD")}
    proc = subprocess.run(
        [sys.executable, "-m", "neuronc"],
        env={**base, "_NEURONC_COMPLETE": instruction, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith("error: shell completion: ") and named in proc.stderr, proc.stderr


def test_an_out_of_range_word_index_completes_nothing() -> None:
    """A COMP_CWORD past the words (or negative) is well-formed: the word being completed is empty."""
    proc = _complete("bash_complete", COMP_WORDS="neuronc cache", COMP_CWORD="7")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
