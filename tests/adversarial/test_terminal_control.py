"""No control character from a bundle reaches the terminal.

A manifest's ``extra.load_snippet`` (printed by ``inspect`` as lines to copy) and its toolchain
versions (named in the ``--against-env`` error details) used to be printed as they were: an
``ESC [2J`` cleared the screen, an ``ESC ]0;...BEL`` retitled the terminal, a carriage return hid
what came before it. They are now shown escaped (``\\x1b``), as every other manifest value is; so
are the values error messages quote.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _bundles import neuronc, profile_for, text, write_bundle

HOSTILE = "\x1b[2J\x1b]0;pwned\x07\r\x9b31m"
# ESC, BEL, CR and the C1 CSI (U+009B, two bytes in UTF-8): what a terminal acts on.
RAW = re.compile(rb"[\x1b\x07\r]|\xc2\x9b")


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """An inductor (CPU) bundle: its backend is installed here, so --against-env compares versions."""
    toolchain = {"neuronc": "0.1.0", "torch": f"2.0{HOSTILE}", "transformers": "4.0", "cpu_isa": f"x{HOSTILE}"}
    extra = {"load_snippet": f"import neuronc\n{HOSTILE}print('loaded')\n"}
    profile = profile_for("inductor", target="cpu")
    return write_bundle(tmp_path / "bundle", "inductor", profile=profile, toolchain=toolchain, extra=extra)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["inspect"], 0),
        (["inspect", "--against-env"], 5),
        (["inspect", "--against-env", "--json"], 5),
        (["verify", "--against-env"], 5),
        (["verify", "--against-env", "--json"], 5),
    ],
    ids=["inspect", "inspect-against-env", "inspect-against-env-json", "verify-against-env", "verify-json"],
)
def test_bundle_values_reach_the_terminal_escaped(tmp_path: Path, bundle: Path, args: list[str], code: int) -> None:
    proc = neuronc(args[0], bundle, *args[1:], cwd=tmp_path)
    assert proc.returncode == code, text(proc)
    for stream in (proc.stdout, proc.stderr):
        assert not RAW.search(stream), stream.decode("utf-8", "replace")
    said = text(proc)
    assert "\\x1b[2J" in said or "\\u001b[2J" in said, said  # shown, escaped


def test_a_control_character_in_a_manifest_value_is_escaped_in_error_messages(tmp_path: Path) -> None:
    """The values error messages quote (here deploy naming the bundle's target) are escaped too."""
    bundle = write_bundle(tmp_path / "bundle", "inductor", profile=profile_for("inductor", target="cpu"))
    from _bundles import edit_manifest

    edit_manifest(bundle, lambda m: m.__setitem__("target", f"cpu{HOSTILE}"))
    proc = neuronc("deploy", bundle, "--for", "vllm", "--out", tmp_path / "d", cwd=tmp_path)
    assert proc.returncode == 2, text(proc)
    assert not RAW.search(proc.stderr), proc.stderr.decode("utf-8", "replace")
