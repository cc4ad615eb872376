"""The Hub model card (README.md) of an ``hf://`` store, written from a bundle's manifest.

Written once, with the first bundle published into a repository that has no README.md: an existing
card (the user's, or one written earlier) is kept. The YAML header holds the Hub's model-card fields
(``base_model``, ``library_name``, ``tags``: huggingface_hub's ``ModelCardData``); the body says what
was compiled (target, tensor parallelism, batch, buckets, dtype, the Neuron SDK), how to deploy it,
and whether the bundle is signed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neuronc.bundle import Manifest

# The library a backend's bundle loads with (the Hub's library_name).
_LIBRARIES = {
    "optimum-neuron": "optimum-neuron",
    "nxdi": "neuronx-distributed-inference",
    "vllm-neuron": "vllm",
    "transformers-neuronx": "transformers-neuronx",
    "torch-neuronx": "torch-neuronx",
    "inductor": "pytorch",
}
_HARDWARE = {"inf2": "inferentia2", "trn1": "trainium", "trn1n": "trainium", "trn2": "trainium2", "trn3": "trainium3"}


def sdk_version(manifest: Manifest) -> str | None:
    """The Neuron SDK release the bundle's toolchain is (None for a CPU bundle or an unknown toolchain)."""
    from neuronc.backends.support import detect_release

    release = detect_release(manifest.toolchain)
    return release.version if release is not None else None


def card_data(manifest: Manifest) -> dict[str, Any]:
    """The model card's YAML fields."""
    model = manifest.profile.get("model") or {}
    model_id = model.get("id") if isinstance(model, Mapping) else None
    hub_model = isinstance(model_id, str) and model_id.count("/") == 1 and not model_id.startswith((".", "/"))
    tags = ["neuronc", manifest.backend]
    if manifest.target != "cpu":
        tags[:0] = ["neuron", _HARDWARE.get(manifest.target, manifest.target)]
    sdk = sdk_version(manifest)
    if sdk is not None:
        tags.append(f"neuron-sdk-{sdk}")
    data: dict[str, Any] = {}
    if hub_model:
        data["base_model"] = model_id
    data["library_name"] = _LIBRARIES.get(manifest.backend, manifest.backend)
    task = model.get("task") if isinstance(model, Mapping) else None
    if isinstance(task, str):
        data["pipeline_tag"] = task
    data["tags"] = tags
    return data


_STACKS = {"torch-neuronx": "torchserve", "inductor": None}


def deploy_lines(manifest: Manifest, store_url: str) -> list[str]:
    """The commands that fetch the bundle from the store and write its serving files."""
    lines = [f"neuronc store fetch {manifest.config_hash[:12]} --store {store_url} --out bundle"]
    stack = _STACKS.get(manifest.backend, "vllm")
    lines.append(f"neuronc deploy bundle --for {stack}" if stack else 'neuronc run bundle --prompt "Hello"')
    return lines


def model_card(manifest: Manifest, *, store_url: str, bundle_url: str, signed: bool) -> str:
    """README.md for the repository a bundle was published to."""
    from huggingface_hub import ModelCardData

    profile = manifest.profile
    sequence = profile.get("sequence") or {}
    model = (profile.get("model") or {}).get("id", "?")
    sdk = sdk_version(manifest)
    rows = [
        ("base model", model),
        ("backend", manifest.backend),
        ("target", manifest.target),
        ("tensor parallelism", profile.get("tp_degree")),
        ("batch size", profile.get("batch_size")),
        ("dtype", profile.get("amp")),
        ("max length", sequence.get("max_length")),
        ("context buckets", ", ".join(map(str, sequence.get("context_buckets") or [])) or "-"),
        ("token buckets", ", ".join(map(str, sequence.get("token_buckets") or [])) or "-"),
        ("Neuron SDK", sdk or "-"),
        ("config hash", manifest.config_hash),
    ]
    table = "\n".join(["| | |", "|---|---|", *(f"| {k} | `{v}` |" for k, v in rows)])
    snippet = manifest.extra.get("load_snippet")
    load = f"\nOr load it in Python:\n\n```python\n{snippet}\n```\n" if isinstance(snippet, str) else ""
    signature = (
        "The bundle is signed: `neuronc verify BUNDLE --require-signature` checks it."
        if signed
        else "The bundle is not signed; `neuronc verify BUNDLE` checks every file's SHA-256 against the manifest."
    )
    deploy = "\n".join(deploy_lines(manifest, store_url))
    body = f"""
# {model} for AWS Neuron ({manifest.target}), compiled by neuronc

Compiled ahead of time by [neuronc](https://pypi.org/project/neuronc/) with the {manifest.backend}
backend; this repository is a neuronc bundle store, and the bundle is at `{bundle_url}`.

{table}

## Deploy

```bash
{deploy}
```
{load}
## Integrity

{signature}
"""
    header = ModelCardData(**card_data(manifest)).to_yaml()
    return f"---\n{header}\n---\n{body}"
