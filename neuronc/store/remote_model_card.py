"""The Hub model card (README.md) of an ``hf://`` store, written from a bundle's manifest.

Every value from the manifest is data, never markup: a name goes through ``errors.printable`` (one
line, no control character), then is shown as code when it holds only plain characters, else with
Markdown's and HTML's special characters escaped; the load snippet sits in a fence longer than any
run of backticks in it. A model id is ``base_model`` only when it is a Hub id (``org/name`` by
huggingface_hub's rules); a local directory is named by its last component only (never the build
host's path).

Written once, with the first bundle published into a repository that has no README.md: an existing
card (the user's, or one written earlier) is kept. The YAML header holds the Hub's model-card fields
(``base_model``, ``library_name``, ``tags``: huggingface_hub's ``ModelCardData``); the body says what
was compiled (target, tensor parallelism, batch, buckets, dtype, the Neuron SDK), how to deploy it,
and whether the bundle is signed.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from typing import Any

from neuronc.bundle import Manifest
from neuronc.errors import controls_escaped, printable

_HARDWARE = {"inf2": "inferentia2", "trn1": "trainium", "trn1n": "trainium", "trn2": "trainium2", "trn3": "trainium3"}


def sdk_version(manifest: Manifest) -> str | None:
    """The Neuron SDK release the bundle's toolchain is (None for a CPU bundle or an unknown toolchain)."""
    from neuronc.backends.support import detect_release

    release = detect_release(manifest.toolchain)
    return release.version if release is not None else None


# huggingface_hub's validate_repo_id, for a model id in org/name form.
_HUB_PART = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?\Z")
# What a code span may hold and still read the same in every Markdown renderer.
_PLAIN = re.compile(r"[A-Za-z0-9 ._,:+/@=()-]{0,200}\Z")
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+!|~<>-])")


def hub_model_id(manifest: Manifest) -> str | None:
    """The profile's model id when it is a Hub id (``org/name``); None for a local directory or anything else."""
    model = manifest.profile.get("model")
    model_id = model.get("id") if isinstance(model, Mapping) else None
    if not isinstance(model_id, str) or model_id.count("/") != 1 or ".." in model_id or "--" in model_id:
        return None
    org, name = model_id.split("/")
    return model_id if _HUB_PART.match(org) and _HUB_PART.match(name) and len(model_id) <= 96 else None


def model_name(manifest: Manifest) -> str:
    """How the card names the model: its Hub id, or a local directory's last component (not the host's path)."""
    hub = hub_model_id(manifest)
    if hub is not None:
        return hub
    model = manifest.profile.get("model")
    model_id = model.get("id") if isinstance(model, Mapping) else None
    if not isinstance(model_id, str) or not model_id.strip("/"):
        return "a local model"
    return f"{model_id.rstrip('/').rsplit('/', 1)[-1]} (a local model)"


def markdown_text(value: object) -> str:
    """A value as Markdown text that renders as itself: one line, Markdown and HTML specials escaped."""
    return _MARKDOWN.sub(r"\\\1", html.escape(printable(str(value)), quote=True))


def markdown_code(value: object) -> str:
    """A value as a code span when it is plain, else as escaped text."""
    text = printable(str(value))
    return f"`{text}`" if _PLAIN.match(text) else markdown_text(text)


def card_data(manifest: Manifest) -> dict[str, Any]:
    """The model card's YAML fields."""
    model = manifest.profile.get("model") or {}
    model_id = hub_model_id(manifest)
    tags = ["neuronc", manifest.backend]
    if manifest.target != "cpu":
        tags[:0] = ["neuron", _HARDWARE.get(manifest.target, manifest.target)]
    sdk = sdk_version(manifest)
    if sdk is not None:
        tags.append(f"neuron-sdk-{sdk}")
    data: dict[str, Any] = {}
    if model_id is not None:
        data["base_model"] = model_id
    # The library the bundle loads with (the Hub's library_name): the backend's own package.
    data["library_name"] = _backend_facts(manifest.backend)[0]
    task = model.get("task") if isinstance(model, Mapping) else None
    if isinstance(task, str) and re.fullmatch(r"[a-z0-9][a-z0-9-]{0,63}", task):
        data["pipeline_tag"] = task
    data["tags"] = [tag for tag in tags if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", tag)]
    return data


def _backend_facts(name: str) -> tuple[str, str | None]:
    """The backend's package (its toolchain's main one) and first serving stack; the name alone when unknown."""
    from neuronc.backends import backend_for_manifest
    from neuronc.errors import NeuroncError

    try:  # a published bundle's manifest names its backend: resolved here, once per fact
        backend = backend_for_manifest(name)
    except NeuroncError:
        return name, None
    stack = str(backend.serving_stacks[0]) if backend.serving_stacks else None
    return backend.toolchain.toolchain_package or name, stack


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
    sequence = sequence if isinstance(sequence, Mapping) else {}
    model = model_name(manifest)
    sdk = sdk_version(manifest)
    rows = [
        ("base model", model),
        ("backend", manifest.backend),
        ("target", manifest.target),
        ("tensor parallelism", profile.get("tp_degree")),
        ("batch size", profile.get("batch_size")),
        ("dtype", profile.get("amp")),
        ("max length", sequence.get("max_length")),
        ("context buckets", _numbers(sequence.get("context_buckets"))),
        ("token buckets", _numbers(sequence.get("token_buckets"))),
        ("Neuron SDK", sdk or "-"),
        ("config hash", manifest.config_hash),
    ]
    table = "\n".join(["| | |", "|---|---|", *(f"| {k} | {markdown_code(v)} |" for k, v in rows)])
    snippet = manifest.extra.get("load_snippet")
    load = f"\nOr load it in Python:\n\n{_fenced(snippet, 'python')}\n" if isinstance(snippet, str) else ""
    signature = (
        "The bundle is signed: `neuronc verify BUNDLE --require-signature` checks it."
        if signed
        else "The bundle is not signed; `neuronc verify BUNDLE` checks every file's SHA-256 against the manifest."
    )
    deploy = _fenced("\n".join(deploy_lines(manifest, store_url)), "bash")
    body = f"""
# {markdown_text(model)} for AWS Neuron ({markdown_text(manifest.target)}), compiled by neuronc

Compiled ahead of time by [neuronc](https://pypi.org/project/neuronc/) with the {markdown_text(manifest.backend)}
backend; this repository is a neuronc bundle store, and the bundle is at {markdown_code(bundle_url)}.

{table}

## Deploy

{deploy}
{load}
## Integrity

{signature}
"""
    header = ModelCardData(**card_data(manifest)).to_yaml()
    return f"---\n{header}\n---\n{body}"


def _numbers(value: object) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) and value else "-"


def _fenced(code: str, language: str) -> str:
    """``code`` in a fenced block no line of it can close: a fence longer than its longest run of backticks."""
    runs = [len(run) for run in re.findall(r"`+", code)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return f"{fence}{language}\n{controls_escaped(code)}\n{fence}"
