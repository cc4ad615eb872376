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
    # The library the bundle loads with (the Hub's library_name): the backend's own package.
    data["library_name"] = _backend_facts(manifest.backend)[0]
    task = model.get("task") if isinstance(model, Mapping) else None
    if isinstance(task, str):
        data["pipeline_tag"] = task
    data["tags"] = tags
    return data


def _backend_facts(name: str) -> tuple[str, str | None]:
    """The backend's package (its toolchain's main one) and first serving stack; the name alone when unknown."""
    from neuronc.backends import resolve_backend
    from neuronc.errors import NeuroncError

    try:  # a published bundle's manifest names its backend: resolved here, once per fact
        backend = resolve_backend(name)
    except NeuroncError:
        return name, None
    stack = str(backend.serving_stacks[0]) if backend.serving_stacks else None
    return backend.toolchain_package or name, stack


def deploy_lines(manifest: Manifest, store_url: str) -> list[str]:
    """The commands that fetch the bundle from the store and write its serving files (or run / inspect it)."""
    lines = [f"neuronc store fetch {manifest.config_hash[:12]} --store {store_url} --out bundle"]
    stack = _backend_facts(manifest.backend)[1]
    if stack is not None:
        lines.append(f"neuronc deploy bundle --for {stack}")
    elif manifest.target == "cpu":
        lines.append('neuronc run bundle --prompt "Hello"')
    else:
        lines.append("neuronc inspect bundle")
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
