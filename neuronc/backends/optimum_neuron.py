"""optimum-neuron backend: ``NeuronModelForCausalLM.export`` with the profile's shapes.

Written against optimum-neuron 0.4.x, whose decoder backend is its own port of NxD Inference
(reference/neuron-apis.md §4). The profile maps to the export arguments of
``optimum-cli export neuron`` (``export_arguments``) and to the ``NxDNeuronConfig`` fields neuronc
decides (``neuron_config_kwargs``); model-specific defaults (on-device sampling, fused QKV,
continuous batching) come from optimum-neuron's own ``get_neuron_config``. The exported directory
(``neuron_config.json``, ``config.json``, ``model.pt``, tokenizer, and the weights as the weights
mode says) is ``artifacts/``: ``NeuronModelForCausalLM.from_pretrained``, TGI and
``optimum-cli neuron serve`` load it as it is.
"""

from __future__ import annotations

import shlex
import time
from typing import TYPE_CHECKING, Any, ClassVar

from neuronc.backends._neuron_common import (
    BUNDLE_PLACEHOLDER,
    NEURON_EXTRA_INDEX,
    NeuronBackend,
    bundle_line,
    bundle_rel,
    copy_checkpoint,
    copy_tokenizer_files,
    even_split,
    hub_revision_of,
    is_hub_id,
    platform_target,
)
from neuronc.backends.base import (
    GIB,
    ROLE_CONTEXT,
    ROLE_TOKEN,
    CompileJob,
    CompilePlan,
    CompileResult,
    GraphSpec,
    HostRamModel,
)
from neuronc.errors import InvalidInputError

if TYPE_CHECKING:
    from neuronc.spec import BuildSpec

# NxDNeuronConfig fields neuronc sets from the profile; options.neuron_config may set the others.
_MANAGED = frozenset(
    {
        "checkpoint_id",
        "checkpoint_revision",
        "batch_size",
        "max_batch_size",
        "sequence_length",
        "max_context_length",
        "tp_degree",
        "torch_dtype",
        "target",
        "local_ranks_size",
    }
)


def export_arguments(spec: BuildSpec) -> dict[str, Any]:
    """The ``optimum-cli export neuron`` arguments for a BuildSpec (reference §4.1)."""
    return {
        "batch_size": spec.batch_size,
        "sequence_length": spec.sequence.max_length,
        "tensor_parallel_size": spec.tp_degree,
        "instance_type": spec.target,
        "torch_dtype": spec.dtype,
    }


def export_command(spec: BuildSpec, output: str) -> str:
    """The equivalent ``optimum-cli`` command line (for people reproducing a bundle by hand)."""
    args = ["optimum-cli", "export", "neuron", "-m", spec.model.id]
    for key, value in export_arguments(spec).items():
        args += [f"--{key}", str(value)]
    args.append(output)
    return shlex.join(args)


def neuron_config_kwargs(spec: BuildSpec, checkpoint_revision: str | None = None) -> dict[str, Any]:
    """The ``NxDNeuronConfig`` keyword arguments neuronc decides (reference §4.3).

    ``target`` is the normalised instance family optimum-neuron stores (inf2 and trn1n become trn1).
    ``checkpoint_id``/``checkpoint_revision`` name the Hub checkpoint for Hub models, which is what
    lets ``weights: reference`` bundles download their weights at load time; local models have none.
    """
    hub = is_hub_id(spec)
    kwargs: dict[str, Any] = {
        "checkpoint_id": spec.model.id if hub else None,
        "checkpoint_revision": (checkpoint_revision or spec.model.revision) if hub else None,
        "batch_size": spec.batch_size,
        "sequence_length": spec.sequence.max_length,
        "max_context_length": spec.sequence.max_context_length,
        "tp_degree": spec.tp_degree,
        "torch_dtype": spec.dtype,
        "target": platform_target(spec.target),
    }
    extra = spec.options.get("neuron_config") or {}
    clash = sorted(set(extra) & _MANAGED)
    if clash:
        msg = f"options.neuron_config sets {', '.join(clash)}, which come from the profile's own fields"
        raise InvalidInputError(msg)
    kwargs.update(extra)
    return kwargs


def continuous_batching(spec: BuildSpec) -> bool:
    """optimum-neuron's Llama-family default: continuous batching whenever batch_size > 1."""
    value = (spec.options.get("neuron_config") or {}).get("continuous_batching")
    return bool(value) if value is not None else spec.batch_size > 1


class OptimumNeuronBackend(NeuronBackend):
    name: ClassVar[str] = "optimum-neuron"
    host_ram: ClassVar[HostRamModel | None] = HostRamModel(4 * GIB, 2.0, 2 * GIB, False, "NxD tracing, as nxdi")
    toolchain_package: ClassVar[str | None] = "optimum-neuron"
    uses_hf_neuron_cache: ClassVar[bool] = True
    description: ClassVar[str] = "optimum-neuron: NeuronModelForCausalLM.export()"
    packages: ClassVar[tuple[str, ...]] = (
        "optimum-neuron",
        "neuronx-cc",
        "torch-neuronx",
        "libneuronxla",
        "neuronx-distributed",
        "torch",
        "transformers",
    )
    required: ClassVar[tuple[str, ...]] = ("optimum-neuron", "neuronx-cc", "torch-neuronx", "neuronx-distributed")
    install_hint: ClassVar[str | None] = (
        "pip install optimum-neuron, plus neuronx-cc, torch-neuronx and neuronx-distributed from "
        f"{NEURON_EXTRA_INDEX} (the Neuron SDK is not on PyPI)"
    )
    options_help: ClassVar[dict[str, str]] = {
        "neuron_config": "NxDNeuronConfig fields to override, e.g. {on_device_sampling: false}",
    }

    def check_spec_or_raise(self, spec: BuildSpec) -> None:
        super().check_spec_or_raise(spec)
        seq = spec.sequence
        if seq.context_buckets != (seq.max_context_length,) or seq.token_buckets != (seq.max_length,):
            msg = (
                "optimum-neuron compiles one context-encoding graph at sequence.max_context_length and one "
                "token-generation graph at sequence.max_length; it has no bucket lists"
            )
            raise InvalidInputError(msg, hint="remove sequence.context_buckets/token_buckets, or use the nxdi backend")
        if spec.weights == "reference" and not is_hub_id(spec):
            msg = "weights: reference needs a Hub model: optimum-neuron downloads the weights by checkpoint_id at load"
            raise InvalidInputError(msg, hint="use weights: presharded or on-load for a local checkpoint")
        extra = spec.options.get("neuron_config")
        if extra is not None and not isinstance(extra, dict):
            msg = "options.neuron_config must be a mapping of NxDNeuronConfig fields"
            raise InvalidInputError(msg)
        neuron_config_kwargs(spec)

    def plan(self, spec: BuildSpec) -> CompilePlan:
        self.check_spec_or_raise(spec)
        seq = spec.sequence
        # With continuous batching the context-encoding graph takes one sequence at a time.
        ctx_batch = 1 if continuous_batching(spec) else spec.batch_size
        graphs = (
            GraphSpec(ROLE_CONTEXT, ctx_batch, seq.max_context_length),
            GraphSpec(ROLE_TOKEN, spec.batch_size, seq.max_length),
        )
        layout = {
            "presharded": f"optimum-neuron's {spec.tp_degree} rank shards in artifacts/checkpoint/weights/",
            "on-load": "checkpoint safetensors in artifacts/, sharded by optimum-neuron when loaded",
            "reference": f"downloaded from {spec.model.id} (checkpoint_id) and sharded when loaded",
        }[spec.weights]
        state = "on" if continuous_batching(spec) else "off"
        notes = (f"continuous batching {state}: context encoding runs at batch {ctx_batch}",)
        return CompilePlan(graphs=graphs, weights_layout=layout, notes=notes)

    def compile_in_process(self, job: CompileJob) -> CompileResult:
        import torch
        from optimum.neuron import NeuronModelForCausalLM
        from transformers import AutoConfig

        spec = job.spec
        ckpt = str(job.checkpoint_dir)
        dtype = getattr(torch, spec.dtype)
        config = AutoConfig.from_pretrained(ckpt).get_text_config()
        # optimum-neuron 0.4 takes the dtype from the model config (not from --torch_dtype).
        config.dtype = dtype
        args = export_arguments(spec)
        neuron_config = NeuronModelForCausalLM.get_neuron_config(
            ckpt,
            config=config,
            instance_type=args["instance_type"],
            batch_size=args["batch_size"],
            sequence_length=args["sequence_length"],
            tensor_parallel_size=args["tensor_parallel_size"],
        )
        managed = neuron_config_kwargs(spec, hub_revision_of(job.checkpoint_dir, spec))
        for key, value in managed.items():
            setattr(neuron_config, key, dtype if key == "torch_dtype" else value)
        out = job.artifacts_dir
        task = job.progress.task("optimum-neuron: export", total=len(job.plan.graphs))
        start = time.monotonic()
        model = NeuronModelForCausalLM.export(
            model_id=ckpt, neuron_config=neuron_config, config=config, load_weights=False
        )
        seconds = time.monotonic() - start
        task.advance(len(job.plan.graphs))
        bundled: list[str] = []
        if spec.weights == "presharded":
            # Exported from a local directory, save_pretrained shards into checkpoint/weights/.
            model.save_pretrained(str(out))
        else:
            model.save(str(out) + "/")
            if spec.weights == "on-load":
                bundled = copy_checkpoint(job.checkpoint_dir, out, with_config=False)
        bundled += copy_tokenizer_files(job.checkpoint_dir, out)
        extra = {
            "load_snippet": optimum_load_snippet(BUNDLE_PLACEHOLDER),
            "optimum_neuron": {
                "export_arguments": args,
                "export_command": export_command(spec, "<bundle>/artifacts"),
                "neuron_config": managed,
                "weights": spec.weights,
                "files_from_checkpoint": bundled,
            },
            "timing": "one export() call builds both graphs; per-graph seconds are its total split evenly",
        }
        artifact = bundle_rel(job, out / "model.pt")
        return CompileResult(graphs=even_split(job.plan.graphs, artifact, seconds), extra=extra)

    def load_snippet(self, bundle_dir: str) -> str | None:
        return optimum_load_snippet(bundle_dir)


def optimum_load_snippet(bundle_dir: str) -> str:
    """Python lines that load an optimum-neuron bundle (same optimum-neuron and neuronx-cc versions)."""
    return "\n".join(
        [
            bundle_line(bundle_dir),
            "from optimum.neuron import NeuronModelForCausalLM",
            "from transformers import AutoTokenizer",
            'model = NeuronModelForCausalLM.from_pretrained(f"{bundle}/artifacts")',
            'tokenizer = AutoTokenizer.from_pretrained(f"{bundle}/artifacts")',
            "# or serve it: optimum-cli neuron serve -m <bundle>/artifacts (TGI: MODEL_ID=<bundle>/artifacts)",
        ]
    )
