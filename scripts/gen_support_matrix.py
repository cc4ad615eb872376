#!/usr/bin/env python3
"""Write the support matrix tables in docs/backends.md and docs/deploy.md from neuronc's own table.

The rows are ``neuronc.backends.support_data.RELEASES``; each document carries its tables between
``<!-- support-matrix:NAME begin -->`` and ``<!-- support-matrix:NAME end -->`` markers, and this
script rewrites what is between them. tests/docs/test_support_matrix_docs.py runs ``--check``.

    .venv/bin/python scripts/gen_support_matrix.py          # rewrite the tables
    .venv/bin/python scripts/gen_support_matrix.py --check  # exit 1 if a document is stale
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from neuronc.backends.support import Image, Release, Serves, Status, image_pins, releases  # noqa: E402
from neuronc.backends.support_data import SOURCES  # noqa: E402

BACKENDS = ("nxdi", "vllm-neuron", "torch-neuronx", "optimum-neuron", "transformers-neuronx")
COMPONENTS = (
    ("neuronx-cc", "neuronx-cc"),
    ("neuronx-distributed-inference", "NxD Inference"),
    ("torch-neuronx", "torch-neuronx"),
    ("libtorch-neuronx-lite", "libtorch-neuronx-lite"),
    ("vllm-neuron", "vllm-neuron"),
    ("vllm", "vLLM"),
    ("optimum-neuron", "optimum-neuron"),
    ("transformers-neuronx", "transformers-neuronx"),
    ("nki", "NKI"),
)


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return "\n".join([_row(header), _row(["---"] * len(header)), *(_row(r) for r in rows)])


def _release_cell(release: Release) -> str:
    return f"{release.version}{'' if release.verified else ' ¹'}"


def components_table() -> str:
    rows = []
    for release in releases():
        cells = [_release_cell(release), release.date or "?"]
        cells += [", ".join(release.packages.get(name, ())) or "—" for name, _ in COMPONENTS]
        cells.append(", ".join(release.torchneuron) or "—")
        rows.append(cells)
    return _table(["SDK", "date", *(label for _, label in COMPONENTS), "TorchNeuron (as torch-neuronx)"], rows)


def _support_cell(release: Release, backend: str) -> str:
    entry = release.backends.get(backend)
    if entry is None:
        return "—"
    status = "" if entry.status is Status.SUPPORTED else f" ({entry.status})"
    return ", ".join(f"{t}²" if t in entry.named_only else t for t in entry.targets) + status


def backends_table() -> str:
    rows = [[_release_cell(r), *(_support_cell(r, b) for b in BACKENDS), "; ".join(r.sources)] for r in releases()]
    return _table(["SDK", *BACKENDS, "sources"], rows)


# What deploy does where the table has no image to serve with (docs/deploy.md says why).
V0_FORK = (
    "serve.sh only, no compose file: AWS's V0 fork (`aws-neuron/upstreaming-to-vllm` branch 2.26.1, cloned in "
    "the image's Dockerfile), whose parser is neither on PyPI nor in a public source neuronc could check against"
)
NO_IMAGE = "none published: deploy refuses `sdk: {version}` naming {nearest}'s image{why}"
UNKNOWN_PIN = "unknown (no source)"


def _components(image: Image, release: Release) -> tuple[str, str, str]:
    """neuronx-cc, NKI and what else the image pins that a bundle is tied to (support.image_pins)."""
    pins = image_pins(image)
    packages: Mapping[str, str] = image.packages
    cc = packages.get("neuronx-cc") or release.version_of("neuronx-cc") or "–"
    nki = packages.get("nki") or "–"
    if "neuronx-distributed-inference" in packages:
        torch = packages.get("torch-neuronx")
        return (
            cc,
            nki,
            f"NxDI {packages['neuronx-distributed-inference']}" + (f", torch-neuronx {torch}" if torch else ""),
        )
    if "libtorch-neuronx-lite" in pins:
        return cc, nki, f"lite {pins['libtorch-neuronx-lite'] or UNKNOWN_PIN}"
    return cc, nki, "–"


def images_table() -> str:
    """The AWS vLLM images per release: what deploy serves a bundle of that release with."""
    rows = []
    previous: Release | None = None
    for release in releases():
        served = [i for i in release.images if i.serves is not Serves.PYTORCH]
        if not served:
            nearest = previous.version if previous is not None else "?"
            why = "" if release.verified else " (no versions or tag of it were found)"
            rows.append([release.version, NO_IMAGE.format(version=release.version, nearest=nearest, why=why)])
            rows[-1] += ["–"] * 7
        for image in served:
            cc, nki, library = _components(image, release)
            if image.serves is Serves.VLLM_V0:
                row = [release.version, f"`{image.tag}`", V0_FORK, f"{image.vllm} (fork)", "–", cc, nki, library, "–"]
                rows.append(row)
                continue
            rows.append(
                [
                    release.version,
                    f"`{image.tag}`",
                    "NxDI" if image.serves is Serves.NXDI else "vllm-neuron",
                    image.vllm or "–",
                    image.plugin or "–",
                    cc,
                    nki,
                    library,
                    f"vLLM {image.vllm}",
                ]
            )
        if served:
            previous = release
    header = ["SDK", "tag", "serves", "vLLM", "vllm-neuron", "neuronx-cc", "NKI", "NxDI / lite", "flags checked with"]
    return "\n".join([_table(header, rows), "", *IMAGE_NOTES])


# Said under the images table (docs/deploy.md): what deploy compares, and what was never run.
IMAGE_NOTES = (
    "Deploy (and a compile in the image) compares what the image pins: neuronx-cc, NKI and "
    "libtorch-neuronx-lite for vllm-neuron (the plugin's cache key), neuronx-cc, NxDI and torch-neuronx for NxD "
    "Inference (`support.pin_mismatches`); vLLM, vllm-neuron and torch are recorded in the manifest, not "
    f"compared. A pin shown as {UNKNOWN_PIN} cannot be checked: a host-compiled bundle is refused that image "
    "(a bundle compiled in the image, by digest, or `--image` is served). None of these images has a SageMaker "
    "serving integration (`DLC-NO-SAGEMAKER`): `--for sagemaker` of an NxDI or vllm-neuron bundle is refused "
    "with the way to build your own image. Nothing here was pulled or run on a Neuron device.",
)


def _span(versions: list[str]) -> str:
    return versions[0] if len(versions) == 1 else f"{versions[0]}–{versions[-1]}"


def _backend_notes() -> list[str]:
    """Per backend: the releases used only when sdk: names them (and why), and the LNC values it takes."""
    lines = []
    for backend in BACKENDS:
        # reason -> (targets, releases), in table order
        named: dict[str, tuple[dict[str, None], dict[str, None]]] = {}
        notes: dict[str, dict[str, None]] = {}
        lnc = ""
        for release in releases():
            entry = release.backends.get(backend)
            if entry is None:
                continue
            for target, why in entry.named_only.items():
                targets, versions = named.setdefault(why, ({}, {}))
                targets[target] = None
                versions[release.version] = None
            if entry.lnc is not None and entry.lnc_note:
                lnc = f"LNC {', '.join(map(str, entry.lnc))} only: {entry.lnc_note}"
            if entry.named_only and entry.note:
                notes.setdefault(entry.note, {})[release.version] = None
        for note, versions in notes.items():
            lines.append(f"- {backend}, SDK {_span(list(versions))}: {note}")
        for why, (targets, versions) in named.items():
            lines.append(
                f"- {backend} on {', '.join(targets)}, SDK {_span(list(versions))}: ² only when `sdk:` names it; {why}"
            )
        if lnc:
            lines.append(f"- {backend}: {lnc}")
    return lines


def notes_list() -> str:
    lines = [f"- **{r.version}**: {r.note}" for r in releases() if r.note]
    lines += _backend_notes()
    lines += [
        "",
        "¹ carried from the previous release: no release notes, component versions or image tags of it were found.",
        "² used only when the profile's `sdk:` names the release: without `sdk:` the build resolves to the newest "
        "release that needs no naming, and an installed release of this kind is refused unless named.",
        "",
        "Nothing in this matrix ran on a Neuron device: every row is read from the sources below. Unverified on "
        "hardware in particular: Trn3 on 2.27.0–2.28.1 (release notes only), NxD Inference on Inf2/Trn1 from 2.29, "
        "the 2.33 native route's CPU compile, and whether a cache compiled with one libtorch-neuronx-lite build "
        "misses with another (2.33.0 → 2.33.1).",
    ]
    return "\n".join(lines)


def sources_list() -> str:
    return "\n".join(f"- `{key}`: {text}" for key, text in SOURCES.items())


# Which tables each document carries, by marker name.
DOCUMENTS: dict[str, dict[str, Callable[[], str]]] = {
    "docs/backends.md": {
        "backends": backends_table,
        "components": components_table,
        "notes": notes_list,
        "sources": sources_list,
    },
    "docs/deploy.md": {"images": images_table},
}


def rewrite(text: str, tables: dict[str, Callable[[], str]], path: str) -> str:
    for name, render in tables.items():
        pattern = re.compile(
            rf"(<!-- support-matrix:{name} begin -->\n).*?(<!-- support-matrix:{name} end -->)", re.DOTALL
        )
        if not pattern.search(text):
            raise SystemExit(f"{path}: no <!-- support-matrix:{name} begin/end --> markers")
        body = render()
        text = pattern.sub(lambda m, body=body: m.group(1) + body + "\n" + m.group(2), text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a document's tables are stale")
    args = parser.parse_args()
    stale = []
    for relative, tables in DOCUMENTS.items():
        path = ROOT / relative
        text = path.read_text(encoding="utf-8")
        new = rewrite(text, tables, relative)
        if new != text:
            stale.append(relative)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print(f"stale support matrix in {', '.join(stale)}: run scripts/gen_support_matrix.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
