"""Fixtures for the Neuron backend tests: SDK doubles, tiny checkpoints, specs and jobs."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neuronc.backends.base import CompileJob
from neuronc.profile import parse_profile
from neuronc.spec import BuildSpec
from sdk_doubles import SITE, forget_doubles, subprocess_env, write_dist_info

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def sdk_doubles(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Put the SDK doubles on sys.path (and PYTHONPATH) with their distribution metadata.

    Everything goes through ``monkeypatch`` so it is undone in one place, in order, whatever else
    the test patches.
    """
    dist_dir = write_dist_info(tmp_path_factory.mktemp("sdk-dists"))
    monkeypatch.syspath_prepend(str(dist_dir))
    monkeypatch.syspath_prepend(str(SITE))
    monkeypatch.setenv("PYTHONPATH", subprocess_env(dist_dir)["PYTHONPATH"])
    forget_doubles()
    yield dist_dir
    forget_doubles()


def _save(model: Any, directory: Path) -> Path:
    model.save_pretrained(str(directory), safe_serialization=True)
    return directory


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer Llama with 4 heads (2 KV heads), random weights, as save_pretrained writes it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
        max_position_embeddings=512,
        pad_token_id=0,
    )
    return _save(LlamaForCausalLM(config), tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_opt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import OPTConfig, OPTForCausalLM

    torch.manual_seed(0)
    config = OPTConfig(
        hidden_size=16,
        ffn_dim=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        vocab_size=64,
        max_position_embeddings=2048,
        word_embed_proj_dim=16,
    )
    return _save(OPTForCausalLM(config), tmp_path_factory.mktemp("tiny-opt"))


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        vocab_size=64,
        max_position_embeddings=256,
    )
    return _save(BertModel(config), tmp_path_factory.mktemp("tiny-bert"))


def make_spec(text: str, base_dir: Path, index: int = 0) -> BuildSpec:
    """A BuildSpec from profile YAML text (model paths relative to ``base_dir``)."""
    loaded = parse_profile(textwrap.dedent(text), str(base_dir / "profile.yaml"), base_dir=base_dir)
    return loaded.builds[index]


def make_job(spec: BuildSpec, checkpoint: Path, root: Path, **env: str) -> CompileJob:
    """A job whose bundle root is ``root/bundle`` and whose work directory is ``root/work``."""
    from neuronc.backends import get_backend

    bundle = root / "bundle"
    job = CompileJob(
        spec=spec,
        plan=get_backend(spec.backend).plan(spec),
        checkpoint_dir=checkpoint,
        artifacts_dir=bundle / "artifacts",
        logs_dir=bundle / "logs",
        work_dir=root / "work",
        env=dict(env),
    )
    for d in (job.artifacts_dir, job.logs_dir, job.work_dir):
        d.mkdir(parents=True, exist_ok=True)
    return job


def files_under(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())


def bundle_with_extra(directory: Path, spec: BuildSpec, extra: dict[str, Any]) -> Path:
    """A real (minimal) bundle for ``spec`` whose manifest carries ``extra``: what load snippets read."""
    from neuronc.bundle import BuildRecord, BundleWriter
    from neuronc.pipeline import resolve_build

    key = resolve_build(spec, strict=False, environ={}).config
    with BundleWriter(directory) as writer:
        writer.write_bytes("artifacts/model.pt", b"compiled")
        return writer.finish(BuildRecord.for_build(spec, key, {}, extra=extra))
