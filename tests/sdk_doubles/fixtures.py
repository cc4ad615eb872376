"""Fixtures for the Neuron backend tests: SDK doubles, tiny checkpoints, specs and jobs."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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
    return loaded.specs[index]


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
    from neuronc.build import Build
    from neuronc.bundle import BuildRecord, BundleWriter
    from neuronc.pipeline import resolve_build

    key = resolve_build(Build.received(spec), strict=False, environ={}).config
    with BundleWriter(directory) as writer:
        writer.write_bytes("artifacts/model.pt", b"compiled")
        return writer.finish(BuildRecord.for_build(spec, key, {}, extra=extra))


# -- vllm-neuron: the plugin on this host, or the release's DLC image in a stand-in container runtime ---


def release_packages(version: str) -> dict[str, str]:
    """The distributions a host with Neuron SDK ``version``'s vllm-neuron would have (the support matrix)."""
    from neuronc.backends.support import Serves, find_release

    release = find_release(version)
    assert release is not None, version
    image = release.images_serving(Serves.VLLM_NEURON)
    packages = dict(image[0].packages) if image else {n: v[0] for n, v in release.packages.items()}
    packages.pop("torch", None)  # the real torch of this environment stays
    return packages


def hide_container_runtimes(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make neuronc find no container runtime by its own setting, never by removing directories from PATH."""
    nothing = tmp_path_factory.mktemp("no-container-runtime") / "absent-container-runtime"
    monkeypatch.setenv("NEURONC_CONTAINER_RUNTIME", str(nothing))


@pytest.fixture
def vllm_neuron_host(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str], Path]]:
    """``install(version)``: the vllm/vllm_neuron doubles on this host at Neuron SDK ``version``'s versions.

    No container runtime is found meanwhile, whatever is installed (this machine has a docker client without
    an engine): ``NEURONC_CONTAINER_RUNTIME`` names a program that does not exist, which neuronc reads before
    PATH. PATH itself is left whole: Debian's docker.io puts ``docker`` beside ``sh`` and ``bash`` in /usr/bin.
    """
    hide_container_runtimes(tmp_path_factory, monkeypatch)
    monkeypatch.setenv("NEURONC_VLLM_NEURON_RUNNER", "auto")

    def install(version: str) -> Path:
        dist_dir = write_dist_info(tmp_path_factory.mktemp(f"vllm-neuron-{version}"), release_packages(version))
        monkeypatch.syspath_prepend(str(dist_dir))
        monkeypatch.syspath_prepend(str(SITE))
        monkeypatch.setenv("PYTHONPATH", subprocess_env(dist_dir)["PYTHONPATH"])
        forget_doubles()
        return dist_dir

    yield install
    forget_doubles()


@dataclass
class FakeRuntime:
    """The stand-in docker CLI (tests/sdk_doubles/container_runtime.py) and its state."""

    state_file: Path
    bin_dir: Path

    def state(self) -> dict[str, Any]:
        return json.loads(self.state_file.read_text(encoding="utf-8"))

    def write(self, state: dict[str, Any]) -> None:
        self.state_file.write_text(json.dumps(state, indent=1), encoding="utf-8")

    def add_image(
        self, reference: str, packages: dict[str, str], *, local: bool = True, env: dict[str, str] | None = None
    ) -> str:
        """Put an image (its packages and ENV lines) in the local store (or only in the registry); returns its digest."""
        content = reference.encode() + json.dumps([packages, env or {}], sort_keys=True).encode()
        digest = "sha256:" + hashlib.sha256(content).hexdigest()
        state = self.state()
        state["registry"][reference] = {"digest": digest, "packages": packages, "env": env or {}}
        if local:
            state["images"][reference] = {"digest": digest, "packages": packages, "env": env or {}}
        self.write(state)
        return digest

    def add_release_images(self, *, local: bool = True) -> None:
        """Every vllm-neuron DLC image of the support matrix, shipping exactly what the matrix records."""
        from neuronc.backends.support import Serves, releases

        for release in releases():
            for image in release.images_serving(Serves.VLLM_NEURON):
                packages = dict(image.packages)
                lite = packages.get("libtorch-neuronx-lite")
                if lite:  # no Dockerfile pins torch: the lite build's own (2.11.0.1.0.1284 is for torch 2.11.0)
                    packages["torch"] = ".".join(lite.split(".")[:3])
                self.add_image(image.reference, packages, local=local, env=dict(image.env or {}))

    def runs(self) -> list[dict[str, Any]]:
        return [c for c in self.state().get("calls", []) if "run" in c]


@pytest.fixture
def fake_runtime(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRuntime]:
    """A ``docker`` on PATH that is the stand-in runtime; no vllm-neuron installed on this host."""
    root = tmp_path_factory.mktemp("fake-runtime")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    script = Path(__file__).resolve().parent / "container_runtime.py"
    docker = bin_dir / "docker"
    docker.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n', encoding="utf-8")
    docker.chmod(0o755)
    state = root / "state.json"
    state.write_text(json.dumps({"images": {}, "registry": {}, "calls": []}), encoding="utf-8")
    # First on PATH, it shadows any installed docker; PATH keeps every directory (sh and bash live beside docker).
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]))
    monkeypatch.setenv("NEURONC_FAKE_RUNTIME_STATE", str(state))
    monkeypatch.delenv("NEURONC_CONTAINER_RUNTIME", raising=False)
    monkeypatch.delenv("NEURONC_VLLM_NEURON_IMAGE", raising=False)
    monkeypatch.delenv("NEURONC_PULL_IMAGES", raising=False)
    monkeypatch.setenv("NEURONC_VLLM_NEURON_RUNNER", "auto")
    forget_doubles()
    yield FakeRuntime(state, bin_dir)
    forget_doubles()
