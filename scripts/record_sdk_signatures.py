"""Record the upstream signatures of the Neuron SDK APIs neuronc calls, from a source checkout.

    python scripts/record_sdk_signatures.py nxdi --source /tmp/nxdi --ref v0.6.10598 \\
        --commit e07f0567... --sdk-release 2.26.1 --out tests/fixtures/sdk_signatures/

writes ``tests/fixtures/sdk_signatures/neuronx-distributed-inference@v0.6.10598.json``: for every
name in ``RECORD`` below, its parameters (name, ``inspect.Parameter`` kind, default as source text)
and where it is defined; for config classes the keyword arguments their constructor reads
(``kwargs.pop("key", default)``) and what happens to an unknown one. The format is described in
``tests/fixtures/sdk_signatures/README.md``; ``tests/sdk_signatures.py`` loads it.

The source is read with ``ast`` only: nothing upstream is imported or executed (it needs the
Neuron SDK, which does not install here). torch-neuronx is closed source; its ``trace`` signature
comes from the ``.. py:function::`` directive of the aws-neuron-sdk API reference (rst).

Written by hand rather than with a library: ``inspect`` needs importable code, and the static
analysers on PyPI (griffe, jedi) neither follow ``**kwargs`` into ``kwargs.pop`` calls nor resolve
the ``*args, **kwargs`` forwarding NxDI's model classes use.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _sdk_ast import Module, SourceTree, parameters
from _sdk_extract import extract_data, extract_name

# ------------------------------------------------------------------------------------------------
# What to record. One line per name; a model class expands to its constructor, compile/load and the
# config classes its get_neuron_config_cls()/get_config_cls() return.
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Name:
    """One name to record. ``config``: also record the keyword arguments its constructor reads.

    ``returns``: the name is a classmethod returning a class; record that class too, as a config
    class ("config") or with its constructor and ``load`` ("class").
    """

    qualname: str
    config: bool = False
    returns: str | None = None


def model(module: str, cls: str) -> list[Name]:
    """An NxDI ``Neuron<Arch>ForCausalLM``: what neuronc's compile and load snippet call on it."""
    q = f"neuronx_distributed_inference.models.{module}.{cls}"
    return [
        Name(q),
        Name(f"{q}.compile"),
        Name(f"{q}.load"),
        Name(f"{q}.get_neuron_config_cls", returns="config"),
        Name(f"{q}.get_config_cls", returns="class"),
        Name(f"{q}.get_compiler_args"),  # the hook for compiler flags (NxDI reads no NEURON_CC_FLAGS)
    ]


def sampling(cls: str) -> list[Name]:
    """A transformers-neuronx ``<Arch>ForSampling``, as neuronc imports it (the top-level export)."""
    q = f"transformers_neuronx.{cls}"
    methods = (
        "from_pretrained",
        "to_neuron",
        "cpu_compile",
        "save",
        "load",
        "sample",
    )  # sample: the TorchServe handler
    return [Name(q), *(Name(f"{q}.{m}") for m in methods)]


NXDI_CONFIG = "neuronx_distributed_inference.models.config"
NXDI_HF = "neuronx_distributed_inference.utils.hf_adapter"

RECORD: dict[str, list[Name]] = {
    "neuronx-distributed-inference": [
        Name(f"{NXDI_CONFIG}.NeuronConfig", config=True),
        Name(f"{NXDI_CONFIG}.MoENeuronConfig", config=True),
        Name(f"{NXDI_CONFIG}.OnDeviceSamplingConfig", config=True),
        Name(f"{NXDI_CONFIG}.InferenceConfig", config=True),
        Name(f"{NXDI_CONFIG}.InferenceConfig.load"),
        Name(f"{NXDI_CONFIG}.InferenceConfig.save"),
        Name(f"{NXDI_HF}.load_pretrained_config"),
        Name(f"{NXDI_HF}.HuggingFaceGenerationAdapter"),
        Name(f"{NXDI_HF}.HuggingFaceGenerationAdapter.generate"),
        Name("neuronx_distributed_inference.models.model_wrapper.ModelWrapper"),
        Name("neuronx_distributed_inference.utils.constants.MODEL_TYPES"),
        Name("neuronx_distributed_inference.inference_demo.MODEL_TYPES"),
        *model("llama.modeling_llama", "NeuronLlamaForCausalLM"),
        *model("mistral.modeling_mistral", "NeuronMistralForCausalLM"),
        *model("mixtral.modeling_mixtral", "NeuronMixtralForCausalLM"),
        *model("dbrx.modeling_dbrx", "NeuronDbrxForCausalLM"),
        *model("qwen2.modeling_qwen2", "NeuronQwen2ForCausalLM"),
        *model("qwen3.modeling_qwen3", "NeuronQwen3ForCausalLM"),
        *model("qwen3_moe.modeling_qwen3_moe", "NeuronQwen3MoeForCausalLM"),
        *model("gpt_oss.modeling_gpt_oss", "NeuronGptOssForCausalLM"),
        *model("llama4.modeling_llama4", "NeuronLlama4ForCausalLM"),
        *model("llama4.modeling_llama4_text", "NeuronLlama4TextForCausalLM"),
        Name("neuronx_distributed_inference.models.llama4.modeling_llama4.Llama4InferenceConfig", config=True),
        Name("neuronx_distributed_inference.models.image_to_text_model_base.ImageToTextInferenceConfig", config=True),
    ],
    "neuronx-distributed": [
        # NxDI's MoENeuronConfig passes its **kwargs to these.
        Name("neuronx_distributed.modules.moe.moe_configs.RouterConfig", config=True),
        Name("neuronx_distributed.modules.moe.moe_configs.RouterConfig.from_kwargs"),
        Name("neuronx_distributed.modules.moe.moe_configs.BlockwiseMatmulConfig.from_kwargs"),
        # What NxDI's compile() drives (compiler args, sharding) and the multi-rank trace API.
        Name("neuronx_distributed.trace.model_builder.ModelBuilder"),
        Name("neuronx_distributed.trace.model_builder.ModelBuilder.add"),
        Name("neuronx_distributed.trace.model_builder.ModelBuilder.trace"),
        Name("neuronx_distributed.trace.model_builder.ModelBuilder.shard_checkpoint"),
        Name("neuronx_distributed.trace.parallel_model_trace"),
        Name("neuronx_distributed.trace.parallel_model_save"),
        Name("neuronx_distributed.trace.parallel_model_load"),
    ],
    "transformers-neuronx": [
        Name("transformers_neuronx.NeuronConfig", config=True),
        Name("transformers_neuronx.ContinuousBatchingConfig", config=True),
        Name("transformers_neuronx.GenerationConfig", config=True),
        Name("transformers_neuronx.QuantizationConfig", config=True),
        Name("transformers_neuronx.modeling_auto.NEURON_MODEL_FOR_CAUSAL_LM_MAPPING"),
        Name("transformers_neuronx.NeuronAutoModelForCausalLM.from_pretrained"),
        Name("transformers_neuronx.module.save_pretrained_split"),
        *sampling("BloomForSampling"),
        *sampling("GPT2ForSamplingWithContextBroadcasting"),
        *sampling("GPTNeoXForSampling"),
        *sampling("GPTJForSampling"),
        *sampling("LlamaForSampling"),
        *sampling("MistralForSampling"),
        *sampling("MixtralForSampling"),
        *sampling("OPTForSampling"),
    ],
    "torch-neuronx": [
        Name("torch_neuronx.trace"),
    ],
}

# The transformers-neuronx model classes neuronc loads (backend) and samples with (TorchServe handler).
_TNX_CLASSES = (
    "BloomForSampling",
    "GPT2ForSamplingWithContextBroadcasting",
    "GPTNeoXForSampling",
    "GPTJForSampling",
    "LlamaForSampling",
    "MistralForSampling",
    "MixtralForSampling",
    "OPTForSampling",
)
# What neuronc calls today, with where (file:line at the time of writing). tests/test_sdk_signatures.py
# checks that each of these is in every record of its package (found there, or listed as missing).
NEURONC_CALLS: dict[str, dict[str, str]] = {
    "neuronx-distributed-inference": {
        f"{NXDI_HF}.load_pretrained_config": "neuronc/backends/neuron/nxdi.py:286",
        f"{NXDI_HF}.HuggingFaceGenerationAdapter": "neuronc/backends/neuron/nxdi.py:343 (load snippet)",
        f"{NXDI_CONFIG}.NeuronConfig": "neuronc/backends/neuron/nxdi.py:285 (get_neuron_config_cls()(**kwargs))",
        f"{NXDI_CONFIG}.InferenceConfig.load": "neuronc/backends/neuron/nxdi.py:334 (load snippet, reference weights)",
        **{
            f"neuronx_distributed_inference.models.{m}.{c}{suffix}": f"neuronc/backends/neuron/nxdi.py:{line}"
            for m, c in (
                ("llama.modeling_llama", "NeuronLlamaForCausalLM"),
                ("mistral.modeling_mistral", "NeuronMistralForCausalLM"),
                ("mixtral.modeling_mixtral", "NeuronMixtralForCausalLM"),
                ("dbrx.modeling_dbrx", "NeuronDbrxForCausalLM"),
                ("qwen2.modeling_qwen2", "NeuronQwen2ForCausalLM"),
                ("qwen3.modeling_qwen3", "NeuronQwen3ForCausalLM"),
                ("qwen3_moe.modeling_qwen3_moe", "NeuronQwen3MoeForCausalLM"),
                ("gpt_oss.modeling_gpt_oss", "NeuronGptOssForCausalLM"),
            )
            for suffix, line in (
                ("", "291"),
                (".compile", "293"),
                (".load", "341 (load snippet)"),
                (".get_neuron_config_cls", "285"),
                (".get_config_cls", "287"),
            )
        },
    },
    "transformers-neuronx": {
        "transformers_neuronx.NeuronConfig": "neuronc/backends/neuron/transformers_neuronx.py:302",
        **{
            f"transformers_neuronx.{c}{suffix}": f"neuronc/backends/neuron/transformers_neuronx.py:{line}"
            for c in _TNX_CLASSES
            for suffix, line in (
                ("", "298"),
                (".from_pretrained", "307"),
                (".to_neuron", "311"),
                (".cpu_compile", "313"),
                (".save", "315"),
                (".load", "358 (load snippet)"),
            )
        },
        **{
            f"transformers_neuronx.{c}.sample": "neuronc/deploy/tnx_handler.py:189 (NeuroncTnxHandler._generate)"
            for c in _TNX_CLASSES
        },
    },
    "torch-neuronx": {"torch_neuronx.trace": "neuronc/backends/neuron/torch_neuronx.py:188"},
    "neuronx-distributed": {},
}


@dataclass(frozen=True)
class Package:
    dist: str
    import_name: str
    repository: str
    docs_dir: str | None = None  # closed source: signatures come from rst files under this directory
    aliases: tuple[str, ...] = field(default_factory=tuple)


PACKAGES: tuple[Package, ...] = (
    Package(
        "neuronx-distributed-inference",
        "neuronx_distributed_inference",
        "https://github.com/aws-neuron/neuronx-distributed-inference",
        aliases=("nxdi",),
    ),
    Package(
        "neuronx-distributed",
        "neuronx_distributed",
        "https://github.com/aws-neuron/neuronx-distributed",
        aliases=("nxd",),
    ),
    Package(
        "transformers-neuronx",
        "transformers_neuronx",
        "https://github.com/aws-neuron/transformers-neuronx",
        aliases=("tnx",),
    ),
    Package(
        "torch-neuronx",
        "torch_neuronx",
        "https://github.com/aws-neuron/aws-neuron-sdk",
        docs_dir="frameworks/torch/torch-neuronx/api-reference-guide",
    ),
)


def package_named(name: str) -> Package:
    for pkg in PACKAGES:
        if name in (pkg.dist, pkg.import_name, *pkg.aliases):
            return pkg
    known = ", ".join(f"{p.dist} ({'/'.join(p.aliases) or p.import_name})" for p in PACKAGES)
    raise SystemExit(f"unknown package {name!r}; known: {known}")


# ------------------------------------------------------------------------------------------------
# torch-neuronx: the API reference (rst)
# ------------------------------------------------------------------------------------------------

_DIRECTIVE = re.compile(r"^\s*\.\.\s+py:(function|class|method)::\s*(.+)$")
_FIELD = re.compile(r"^\s*:(arg|param|keyword|kwarg)\s+(?:[^:]*\s)?(\w+)\s*:")


def parse_rst_signatures(root: Path, docs_dir: str) -> dict[str, dict[str, Any]]:
    """``.. py:function::`` / ``.. py:class::`` directives under ``docs_dir``: name -> entry."""
    found: dict[str, dict[str, Any]] = {}
    base = root / docs_dir
    if not base.is_dir():
        raise SystemExit(f"{root}: no {docs_dir}/ (is this an aws-neuron-sdk checkout?)")
    for path in sorted(base.rglob("*.rst")):
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        for i, line in enumerate(lines):
            m = _DIRECTIVE.match(line)
            if not m:
                continue
            text, j = m.group(2).strip(), i
            while text.count("(") > text.count(")") and j + 1 < len(lines):  # a signature over several lines
                j += 1
                text += " " + lines[j].strip()
            name, paren, rest = text.partition("(")
            args = rest[: rest.rfind(")")] if paren else ""
            synthetic = f"def _f({args}): pass\n"
            try:
                fn = ast.parse(synthetic).body[0]
            except SyntaxError:
                continue
            assert isinstance(fn, ast.FunctionDef)
            mod = Module("rst", path.relative_to(root).as_posix(), synthetic, ast.Module([], []), False, {}, {})
            documented: list[str] = []
            for following in lines[j + 1 :]:
                if following.strip() and not following.startswith((" ", "\t")):
                    break
                if fm := _FIELD.match(following):
                    documented.append(fm.group(2))
            found[name.strip()] = {
                "kind": "class" if m.group(1) == "class" else "function",
                "defined_in": name.strip(),
                "source": {"path": path.relative_to(root).as_posix(), "line": i + 1},
                "parameters": [p.to_json() for p in parameters(mod, fn.args)],
                "documented_parameters": documented,
            }
    return found


# ------------------------------------------------------------------------------------------------
# Building a record
# ------------------------------------------------------------------------------------------------


def build_record(
    pkg: Package,
    source: Path,
    *,
    ref: str,
    commit: str,
    names: list[Name] | None = None,
    sdk_release: str | None = None,
    wheel_version: str | None = None,
    note: str | None = None,
    companions: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The record of ``names`` (default: ``RECORD[pkg.dist]``) in the checkout at ``source``."""
    wanted = list(RECORD[pkg.dist] if names is None else names)
    recorded: dict[str, Any] = {}
    missing: dict[str, str] = {}
    data: dict[str, Any] = {}
    source_version: str | None = None
    if pkg.docs_dir is not None:
        found = parse_rst_signatures(source, pkg.docs_dir)
        for name in wanted:
            if name.qualname in found:
                recorded[name.qualname] = found[name.qualname]
            else:
                missing[name.qualname] = f"no '.. py:function::' or '.. py:class::' directive under {pkg.docs_dir}"
    else:
        tree = SourceTree(source, pkg.import_name)
        source_version = tree.version()
        queue = list(wanted)
        seen: set[str] = set()
        while queue:
            name = queue.pop(0)
            if name.qualname in seen:
                continue
            seen.add(name.qualname)
            value = extract_data(tree, name.qualname)
            if value is not None:
                data[name.qualname] = value
                continue
            entry, reason = extract_name(tree, name.qualname, config=name.config)
            if entry is None:
                missing[name.qualname] = reason
                continue
            recorded[name.qualname] = entry
            returned = entry.get("returns")
            if name.returns and isinstance(returned, str):
                queue.append(Name(returned, config=True))
                if name.returns == "class":
                    queue += [Name(f"{returned}.load"), Name(f"{returned}.get_neuron_config_cls")]
    record: dict[str, Any] = {
        "schema": 1,
        "package": pkg.dist,
        "import_name": pkg.import_name,
        "repository": pkg.repository,
        "ref": ref,
        "commit": commit,
        "source_version": source_version,
        "sdk_release": sdk_release,
        "wheel_version": wheel_version,
        "note": note,
        "companions": dict(companions or {}),
        "generated_by": "scripts/record_sdk_signatures.py",
        "names": dict(sorted(recorded.items())),
        "data": dict(sorted(data.items())),
        "missing": dict(sorted(missing.items())),
    }
    return record


def record_path(out_dir: Path, dist: str, ref: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", ref)
    return out_dir / f"{dist}@{safe}.json"


def to_json(value: Any, indent: str = "") -> str:
    """JSON with one line per small object (a parameter, a source location), for readable diffs."""
    flat = json.dumps(value, ensure_ascii=False)
    containers = (dict, list)
    values = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    if not isinstance(value, containers) or (len(flat) <= 100 and not any(isinstance(v, containers) for v in values)):
        return flat
    inner = indent + " "
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {to_json(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}" if items else "{}"
    items = [f"{inner}{to_json(v, inner)}" for v in value]
    return "[\n" + ",\n".join(items) + f"\n{indent}]" if items else "[]"


def write_record(record: dict[str, Any], out_dir: Path) -> Path:
    path = record_path(out_dir, record["package"], record["ref"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(to_json(record) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def git_commit(source: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return out if re.fullmatch(r"[0-9a-f]{40}", out) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("package", help="nxdi, nxd, tnx, torch-neuronx (or the distribution name)")
    parser.add_argument("--source", required=True, type=Path, help="checkout of the upstream repository at --ref")
    parser.add_argument("--ref", required=True, help="the tag or branch the checkout is at (names the fixture)")
    parser.add_argument("--commit", help="the commit sha (default: git rev-parse HEAD in --source)")
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/sdk_signatures"))
    parser.add_argument("--sdk-release", help="the Neuron SDK release this ref stands for, e.g. 2.26.1 (default: kept)")
    parser.add_argument("--wheel-version", help="the released wheel's version for that SDK release")
    parser.add_argument("--note", help="why this ref (e.g. the closest available to the wheel)")
    parser.add_argument(
        "--companion", action="append", default=[], metavar="DIST=REF", help="the record of another package to pair"
    )
    args = parser.parse_args(argv)
    pkg = package_named(args.package)
    source: Path = args.source.resolve()
    if not source.is_dir():
        parser.error(f"--source {source}: not a directory")
    commit = args.commit or git_commit(source)
    if not commit or not re.fullmatch(r"[0-9a-f]{40}", commit):
        parser.error("--commit: a 40-hex commit sha is required (the checkout is not a git work tree)")
    # Refreshing a record keeps the metadata given when it was first written, unless given again.
    previous_path = record_path(args.out, pkg.dist, args.ref)
    previous = json.loads(previous_path.read_text(encoding="utf-8")) if previous_path.is_file() else {}
    companions = dict(c.split("=", 1) for c in args.companion) or previous.get("companions") or {}
    record = build_record(
        pkg,
        source,
        ref=args.ref,
        commit=commit,
        sdk_release=args.sdk_release or previous.get("sdk_release"),
        wheel_version=args.wheel_version or previous.get("wheel_version"),
        note=args.note or previous.get("note"),
        companions=companions,
    )
    path = write_record(record, args.out)
    print(f"{path}: {len(record['names'])} names, {len(record['data'])} data, {len(record['missing'])} missing")
    for qualname, reason in record["missing"].items():
        print(f"  missing {qualname}: {reason}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
