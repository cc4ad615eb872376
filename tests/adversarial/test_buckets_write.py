"""`buckets --write` edits only the bucket values (issue 41, item 19): comments inside the lists stay, a
CRLF profile stays CRLF, and anchors and aliases on the lists are kept (a valid profile with an
anchor on a list used to be called "invalid YAML")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _bundles import neuronc, text

from neuronc.buckets.write import set_buckets, write_buckets
from neuronc.profile import load_profile, parse_profile

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "profiles" / "tiny-llama-cpu.yaml"
HEAD = "model: {id: m}\nbackend: inductor\ntarget: cpu\nsequence:\n  max_length: 128\n"


def _buckets(text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The buckets the edited text holds, as the profile loader reads them (no model check)."""
    [build] = parse_profile(text, check_model_config=False).specs
    return build.sequence.context_buckets, build.sequence.token_buckets


@pytest.mark.parametrize(
    ("context", "token"),
    [([16, 32], [128]), ([8], [64, 128]), ([4, 8, 16, 32], [32, 64, 96, 128])],
    ids=["same-count", "fewer-and-more", "more"],
)
def test_comments_inside_block_lists_stay(context: list[int], token: list[int]) -> None:
    profile = HEAD + (
        "  context_buckets:\n"
        "    # prompts of the chat product\n"
        "    - 32   # short prompts\n"
        "    - 64   # long prompts\n"
        "  token_buckets:   # KV lengths\n"
        "    - 64\n"
        "    # the longest answers\n"
        "    - 128  # max_length\n"
        "weights: presharded  # after the lists\n"
    )
    edited = set_buckets(profile, {"context_buckets": context, "token_buckets": token})
    assert _buckets(edited) == (tuple(context), tuple(token))
    for comment in ("# prompts of the chat product", "# short prompts", "# KV lengths", "# the longest answers"):
        assert comment in edited, edited
    assert "weights: presharded  # after the lists\n" in edited


def test_comments_inside_flow_lists_stay() -> None:
    profile = HEAD + "  context_buckets: [32,   # short\n    64]  # long\n  token_buckets: [128]  # one\n"
    edited = set_buckets(profile, {"context_buckets": [16, 48, 64], "token_buckets": [128]})
    assert _buckets(edited) == ((16, 48, 64), (128,))
    assert "# short" in edited and "# long" in edited and "# one" in edited


def test_an_anchor_on_a_list_and_an_alias_to_it_stay_valid() -> None:
    profile = HEAD + "  context_buckets: &buckets [32, 64]  # anchored\n  token_buckets: [128]\n"
    edited = set_buckets(profile, {"context_buckets": [16, 48], "token_buckets": [64, 128]})
    assert "&buckets [16, 48]" in edited and _buckets(edited) == ((16, 48), (64, 128))
    aliased = HEAD + "  context_buckets: &b [32, 64, 128]\n  token_buckets: *b   # the same list\n"
    assert _buckets(aliased) == ((32, 64, 128), (32, 64, 128))
    edited = set_buckets(aliased, {"context_buckets": [16, 48], "token_buckets": [64, 128]})
    assert _buckets(edited) == ((16, 48), (64, 128))
    assert "&b [16, 48]" in edited and "# the same list" in edited
    block = HEAD + "  context_buckets: &c\n    - 32\n    - 64\n  token_buckets: [128]\n"
    edited = set_buckets(block, {"context_buckets": [8, 16, 24], "token_buckets": [128]})
    assert "&c" in edited and _buckets(edited) == ((8, 16, 24), (128,))


def _demo(directory: Path, *, crlf: bool) -> Path:
    shutil.copytree(DEMO.parent / "models", directory / "models")
    profile = directory / "p.yaml"
    data = DEMO.read_bytes()
    profile.write_bytes(data.replace(b"\n", b"\r\n") if crlf else data)
    return profile


def test_a_crlf_profile_stays_crlf(tmp_path: Path) -> None:
    profile = _demo(tmp_path, crlf=True)
    edited = write_buckets(profile, [16, 24], [64, 128])
    raw = profile.read_bytes()
    assert raw.count(b"\r\n") == raw.count(b"\n"), "every line ends in CRLF"
    assert raw.decode() == edited
    assert raw.replace(b"[16, 24]", b"[32, 64]").replace(b"[64, 128]", b"[128]") == DEMO.read_bytes().replace(
        b"\n", b"\r\n"
    )
    [build] = load_profile(profile).specs
    assert build.sequence.context_buckets == (16, 24)


def test_a_crlf_profile_with_a_key_to_add_stays_crlf(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    shutil.copytree(DEMO.parent / "models", tmp_path / "models")
    body = DEMO.read_text().replace(
        "  token_buckets: [128]           # one token-generation graph over the whole KV cache (max_length)\n", ""
    )
    profile.write_bytes(body.replace("\n", "\r\n").encode())
    write_buckets(profile, [16, 24], [64, 128])
    raw = profile.read_bytes()
    assert raw.count(b"\r\n") == raw.count(b"\n")
    assert b"  token_buckets: [64, 128]\r\n" in raw


def test_buckets_write_on_a_crlf_profile_from_the_command_line(tmp_path: Path) -> None:
    profile = _demo(tmp_path, crlf=True)
    proc = neuronc("buckets", profile, "--traffic", "prompt_tokens=20,output_tokens=10", "--write", cwd=tmp_path)
    assert proc.returncode == 0, text(proc)
    raw = profile.read_bytes()
    assert raw.count(b"\r\n") == raw.count(b"\n") and b"[32, 64]" not in raw
