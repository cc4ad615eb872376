"""Contract test against the real optimum-neuron 0.4.5 (its config classes import on CPU).

neuronc's optimum-neuron mapping is checked against optimum-neuron's own code, not a double:
``NxDNeuronConfig``'s constructor must be the one neuronc recorded (``neuron.optimum_fields``, which
``options.neuron_config`` is validated against), must accept every field neuronc sets and keep it
through ``to_dict``, ``save_pretrained`` and ``from_pretrained``; ``get_neuron_config`` and
``export`` must accept the arguments neuronc passes; the instance type and dtype must normalise to
what neuronc records. The SDK double of ``optimum.neuron`` must write the same neuron_config.json
keys as the real class.

optimum-neuron pins transformers 4.57.x and torch 2.8, so this runs in its own environment:
``tests/contract/run_optimum_contract.sh``. Elsewhere it is skipped. The only stand-in is a
``neuronxcc`` module carrying a version string (the compiler is not on PyPI); optimum-neuron reads
nothing else from it here.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "optimum.neuron", reason="optimum-neuron is not installed (run tests/contract/run_optimum_contract.sh)"
)

from neuronc.backends.neuron.optimum_fields import NXD_NEURON_CONFIG_PARAMETERS, OPTIMUM_NEURON_VERSION
from neuronc.backends.neuron.optimum_neuron import get_neuron_config_arguments, neuron_config_kwargs
from neuronc.profile import load_profile, parse_profile

REPO = Path(__file__).resolve().parents[2]
NEURONXCC_VERSION = "2.21.33363.0+82129205"  # the compiler optimum-neuron 0.4.5 pins


@pytest.fixture(autouse=True)
def _neuronxcc_version(monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("neuronxcc") is None:
        stand_in = types.ModuleType("neuronxcc")
        stand_in.__version__ = NEURONXCC_VERSION  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "neuronxcc", stand_in)


def _specs(tmp_path: Path) -> list:  # type: ignore[type-arg]
    shipped = load_profile(REPO / "profiles/llama3.1-8b-optimum-neuron-tgi.yaml").specs
    text = """
    model: {id: example-org/tiny-llama, revision: 0123456789abcdef0123456789abcdef01234567}
    backend: optimum-neuron
    target: trn2
    tp_degree: 4
    batch_size: 1
    amp: fp16
    sequence: {max_length: 4096, max_context_length: 1024}
    weights: reference
    matrix: {amp: [fp16, bf16, fp32]}
    """
    local = parse_profile(text, str(tmp_path / "p.yaml"), base_dir=tmp_path).specs
    return [*shipped, *local]


def test_the_recorded_constructor_is_the_real_one() -> None:
    from optimum.neuron.models.inference.backend.config import NxDNeuronConfig
    from optimum.neuron.version import __version__

    assert __version__ == OPTIMUM_NEURON_VERSION
    parameters = list(inspect.signature(NxDNeuronConfig.__init__).parameters.values())[1:]
    assert [(p.name, repr(p.default)) for p in parameters] == list(NXD_NEURON_CONFIG_PARAMETERS)


def test_nxd_neuron_config_accepts_and_keeps_every_field(tmp_path: Path) -> None:
    import torch
    from optimum.neuron.models.inference.backend.config import NxDNeuronConfig

    parameters = inspect.signature(NxDNeuronConfig.__init__).parameters
    for spec in _specs(tmp_path):
        kwargs = neuron_config_kwargs(spec)
        assert set(kwargs) <= set(parameters), sorted(set(kwargs) - set(parameters))
        config = NxDNeuronConfig(**kwargs)
        assert config.torch_dtype == getattr(torch, spec.dtype)
        data = config.to_dict()
        assert {k: data[k] for k in kwargs} == kwargs
        assert data["_serialized_key"] == "NxDNeuronConfig"
        out = tmp_path / spec.amp / str(spec.build_index)
        config.save_pretrained(out)
        # What the decoder models' from_pretrained does (version checks included).
        reloaded = NxDNeuronConfig.from_pretrained(out)
        assert {k: reloaded.to_dict()[k] for k in kwargs} == kwargs


def test_export_arguments_fit_get_neuron_config_and_normalise_like_neuronc(tmp_path: Path) -> None:
    import torch
    from optimum.neuron import NeuronModelForCausalLM
    from optimum.neuron.utils.argument_utils import DTYPE_MAPPER
    from optimum.neuron.utils.instance import normalize_instance_type

    for spec in _specs(tmp_path):
        args = get_neuron_config_arguments(spec)
        inspect.signature(NeuronModelForCausalLM.get_neuron_config).bind(spec.model.id, config=None, **args)
        assert normalize_instance_type(args["instance_type"]) == neuron_config_kwargs(spec)["target"]
        assert DTYPE_MAPPER.pt(spec.dtype) == getattr(torch, spec.dtype)
        inspect.signature(NeuronModelForCausalLM.export).bind(
            model_id="dir", neuron_config=object(), config=None, load_weights=False
        )


def test_the_sdk_double_writes_the_same_neuron_config_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from optimum.neuron.models.inference.backend.config import NxDNeuronConfig

    site = REPO / "tests/sdk_doubles/site"
    monkeypatch.syspath_prepend(str(site))
    location = site / "optimum/neuron/__init__.py"
    module_spec = importlib.util.spec_from_file_location("optimum_neuron_sdk_double", location)
    assert module_spec is not None and module_spec.loader is not None
    double = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(double)
    for spec in _specs(tmp_path)[:1]:
        kwargs = neuron_config_kwargs(spec)
        real = NxDNeuronConfig(**kwargs).to_dict()
        fake = double.NxDNeuronConfig(**kwargs).to_dict()
        assert sorted(fake) == sorted(real)
        assert json.dumps(fake, sort_keys=True) == json.dumps(real, sort_keys=True)


def _source_signature(module: str, cls: str, method: str) -> inspect.Signature:
    """A method's signature read with ``ast`` from the installed optimum-neuron (for modules that need the SDK)."""
    import ast

    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    func = next(f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == method)
    positional = func.args.posonlyargs + func.args.args
    defaults = [None] * (len(positional) - len(func.args.defaults)) + list(func.args.defaults)
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [
        inspect.Parameter(a.arg, kind, default=inspect.Parameter.empty if d is None else ast.unparse(d))
        for a, d in zip(positional, defaults, strict=True)
    ]
    params += [
        inspect.Parameter(a.arg, inspect.Parameter.KEYWORD_ONLY, default=inspect.Parameter.empty if d is None else 0)
        for a, d in zip(func.args.kwonlyargs, func.args.kw_defaults, strict=True)
    ]
    if func.args.kwarg is not None:
        params.append(inspect.Parameter(func.args.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(params)


class _Exported:
    """What ``export`` returns, for the calls neuronc makes on it: each bound against the real method."""

    def __init__(self, config: Any, neuron_config: Any) -> None:
        self.config = config
        self.neuron_config = neuron_config

    def save(self, *args: Any, **kwargs: Any) -> None:
        # The module imports neuronx_distributed: its signature is read from the installed source.
        signature = _source_signature(
            "optimum.neuron.models.inference.backend.pretrained_model", "NxDPreTrainedModel", "save"
        )
        bound = signature.bind(self, *args, **kwargs)
        self._write(Path(bound.arguments["dest_path"]))

    def save_pretrained(self, *args: Any, **kwargs: Any) -> None:
        from optimum.neuron import NeuronModelForCausalLM

        bound = inspect.signature(NeuronModelForCausalLM.save_pretrained).bind(self, *args, **kwargs)
        self._write(Path(bound.arguments["save_directory"]))

    def _write(self, directory: Path) -> None:
        # The configs as the real save() writes them (model.pt and shards need the Neuron SDK).
        self.config.save_pretrained(directory)
        self.neuron_config.save_pretrained(directory)


@pytest.mark.parametrize(("weights", "options"), [("presharded", ""), ("on-load", "{on_device_sampling: false}")])
def test_the_calls_neuronc_makes_bind_the_real_api_and_the_export_reloads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, weights: str, options: str
) -> None:
    """Run neuronc's own ``compile_in_process``: every optimum-neuron call it makes is bound against
    the real signature, the config it builds is a real ``NxDNeuronConfig``, and the directory it
    leaves loads with the real ``NxDNeuronConfig.from_pretrained``. Only what needs the Neuron SDK is
    not run: the model family's ``_get_neuron_config`` (its module imports neuronx_distributed) is
    replaced by a real ``NxDNeuronConfig`` with the same arguments, and the trace itself."""
    import shutil

    import torch
    from optimum.neuron import NeuronModelForCausalLM
    from optimum.neuron.models.inference.backend.config import NxDNeuronConfig
    from optimum.neuron.utils.argument_utils import DTYPE_MAPPER
    from optimum.neuron.utils.instance import normalize_instance_type

    from neuronc.backends import get_backend
    from neuronc.backends.base import CompileJob

    calls: list[str] = []
    real_get_neuron_config = inspect.signature(NeuronModelForCausalLM.get_neuron_config)
    real_export = inspect.signature(NeuronModelForCausalLM.export)

    def get_neuron_config(*args: Any, **kwargs: Any) -> Any:
        bound = real_get_neuron_config.bind(*args, **kwargs).arguments
        calls.append("get_neuron_config")
        batch = bound["batch_size"]
        return NxDNeuronConfig(
            batch_size=batch,
            sequence_length=bound["sequence_length"],
            tp_degree=bound["tensor_parallel_size"],
            torch_dtype=DTYPE_MAPPER.pt(bound["config"].dtype),
            target=normalize_instance_type(bound["instance_type"]),
            on_device_sampling=True,
            fused_qkv=True,
            continuous_batching=batch > 1,
        )

    def export(*args: Any, **kwargs: Any) -> _Exported:
        bound = real_export.bind(*args, **kwargs).arguments
        calls.append("export")
        return _Exported(bound["config"], bound["neuron_config"])

    monkeypatch.setattr(NeuronModelForCausalLM, "get_neuron_config", staticmethod(get_neuron_config))
    monkeypatch.setattr(NeuronModelForCausalLM, "export", staticmethod(export))
    shutil.copytree(REPO / "profiles/models/tiny-llama", tmp_path / "model")
    text = f"""
    model: {{id: ./model}}
    backend: optimum-neuron
    target: inf2
    tp_degree: 2
    batch_size: 4
    amp: bf16
    sequence: {{max_length: 128, max_context_length: 64}}
    weights: {weights}
    """ + (f"options: {{neuron_config: {options}}}\n" if options else "")
    spec = parse_profile(textwrap.dedent(text), str(tmp_path / "p.yaml"), base_dir=tmp_path).specs[0]
    backend = get_backend("optimum-neuron")
    bundle = tmp_path / "bundle"
    job = CompileJob(
        spec=spec,
        plan=backend.plan(spec),
        checkpoint_dir=tmp_path / "model",
        artifacts_dir=bundle / "artifacts",
        logs_dir=bundle / "logs",
        work_dir=tmp_path / "work",
    )
    job.artifacts_dir.mkdir(parents=True)
    result = backend.compile_in_process(job)  # type: ignore[attr-defined]
    assert calls == ["get_neuron_config", "export"]
    reloaded = NxDNeuronConfig.from_pretrained(job.artifacts_dir)
    assert reloaded.torch_dtype == torch.bfloat16
    assert (reloaded.max_context_length, reloaded.sequence_length, reloaded.tp_degree) == (64, 128, 2)
    assert reloaded.target == "trn1" and reloaded.continuous_batching is True
    assert reloaded.on_device_sampling is (options == "")
    assert result.extra["optimum_neuron"]["neuron_config"] == neuron_config_kwargs(spec)


class _DirectoryHub:
    """The Hub calls optimum-neuron 0.4.5's lookup makes (``HfApi.list_repo_tree`` and
    ``HfApi.hf_hub_download``), answered from a directory that `neuronc cache synchronize --to` wrote:
    a stand-in for the cache repository (no Hub is reachable here, and no local Hub server from PyPI
    runs without a binary it does not ship)."""

    def __init__(self, root: Path, repo_id: str) -> None:
        self.root, self.repo_id = root, repo_id

    def list_repo_tree(self, repo_id: str, path_in_repo: str = "", recursive: bool = False, **_: Any) -> Any:
        from huggingface_hub.errors import EntryNotFoundError
        from huggingface_hub.hf_api import RepoFile, RepoFolder

        assert repo_id == self.repo_id
        base = self.root / path_in_repo.strip("/")
        if not base.is_dir():
            raise EntryNotFoundError(f"{path_in_repo} not found")
        for child in sorted(base.rglob("*") if recursive else base.iterdir()):
            rel = child.relative_to(self.root).as_posix()
            if child.is_dir():
                yield RepoFolder(path=rel, oid="0" * 40, tree_id="0" * 40)
            else:
                yield RepoFile(path=rel, size=child.stat().st_size, oid="0" * 40, blob_id="0" * 40)

    def hf_hub_download(self, repo_id: str, filename: str, local_dir: str | None = None, **_: Any) -> str:
        import shutil

        assert repo_id == self.repo_id and local_dir is not None
        target = Path(local_dir) / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.root / filename, target)
        return str(target)


def test_optimum_neurons_own_code_finds_what_cache_synchronize_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An export through neuronc's ``compile_in_process`` (the real ``NxDNeuronConfig``, real transformers;
    ``export`` leaves the configs and, as libneuronxla does, the compile-cache entries of its two
    graphs), published with `cache synchronize`'s code into a directory. Then optimum-neuron 0.4.5:
    its ``SingleModelCacheEntry`` built from the exported config and neuron config serialises to the
    same bytes under the same hash and arch digest, and its ``get_hub_cached_entries`` finds the
    entry for the model directory."""
    import hashlib
    import shutil

    import huggingface_hub
    from optimum.neuron import NeuronModelForCausalLM
    from optimum.neuron.cache.entries.cache_entry import ModelCacheEntry
    from optimum.neuron.cache.entries.single_model import SingleModelCacheEntry
    from optimum.neuron.cache.hub_cache import get_hub_cached_entries
    from optimum.neuron.models.inference.backend.config import NxDNeuronConfig
    from optimum.neuron.utils.argument_utils import DTYPE_MAPPER
    from optimum.neuron.utils.instance import normalize_instance_type
    from transformers import AutoConfig

    from neuronc.backends import get_backend
    from neuronc.backends.base import CompileJob
    from neuronc.hubcache.publish import BundlePublication, publication
    from neuronc.hubcache.publish_tree import write_tree

    cache = tmp_path / "neuron-compile-cache"
    monkeypatch.setenv("NEURON_COMPILE_CACHE_URL", str(cache))
    real_get_neuron_config = inspect.signature(NeuronModelForCausalLM.get_neuron_config)
    real_export = inspect.signature(NeuronModelForCausalLM.export)

    def get_neuron_config(*args: Any, **kwargs: Any) -> Any:
        bound = real_get_neuron_config.bind(*args, **kwargs).arguments
        return NxDNeuronConfig(
            batch_size=bound["batch_size"],
            sequence_length=bound["sequence_length"],
            tp_degree=bound["tensor_parallel_size"],
            torch_dtype=DTYPE_MAPPER.pt(bound["config"].dtype),
            target=normalize_instance_type(bound["instance_type"]),
            on_device_sampling=True,
            fused_qkv=True,
            continuous_batching=bound["batch_size"] > 1,
        )

    def export(*args: Any, **kwargs: Any) -> _Exported:
        bound = real_export.bind(*args, **kwargs).arguments
        bound["config"].torch_dtype = bound["neuron_config"].torch_dtype  # as NxDPreTrainedModel._export
        for graph in ("context_encoding", "token_generation"):
            flags = ["--target", bound["neuron_config"].target, "--model-type=transformer", "--auto-cast=none"]
            suffix = hashlib.md5(json.dumps(flags).encode()).hexdigest()[:8]
            entry = (
                cache
                / f"neuronxcc-{NEURONXCC_VERSION}"
                / f"MODULE_{hashlib.sha256(graph.encode()).hexdigest()[:20]}+{suffix}"
            )
            entry.mkdir(parents=True)
            (entry / "compile_flags.json").write_text(json.dumps(flags))
            (entry / "model.neff").write_bytes(b"NEFF " + graph.encode())
            (entry / "model.done").write_bytes(b"")
        return _Exported(bound["config"], bound["neuron_config"])

    monkeypatch.setattr(NeuronModelForCausalLM, "get_neuron_config", staticmethod(get_neuron_config))
    monkeypatch.setattr(NeuronModelForCausalLM, "export", staticmethod(export))
    shutil.copytree(REPO / "profiles/models/tiny-llama", tmp_path / "model")
    text = """
    model: {id: ./model}
    backend: optimum-neuron
    target: inf2
    tp_degree: 2
    batch_size: 4
    amp: fp32
    sequence: {max_length: 128}
    weights: on-load
    """  # fp32: the checkpoint's own dtype, the one a 0.4.5 lookup digests (reference note §4.6)
    spec = parse_profile(textwrap.dedent(text), str(tmp_path / "p.yaml"), base_dir=tmp_path).specs[0]
    backend = get_backend("optimum-neuron")
    job = CompileJob(
        spec=spec,
        plan=backend.plan(spec),
        checkpoint_dir=tmp_path / "model",
        artifacts_dir=tmp_path / "bundle" / "artifacts",
        logs_dir=tmp_path / "bundle" / "logs",
        work_dir=tmp_path / "work",
    )
    job.artifacts_dir.mkdir(parents=True)
    result = backend.compile_in_process(job)  # type: ignore[attr-defined]
    recorded = result.extra["optimum_neuron"]["compile_cache"]
    assert len(recorded["modules"]) == 2

    model_id = "example-org/tiny-llama"
    pub = publication(
        BundlePublication(str(tmp_path / "bundle")),
        job.artifacts_dir,
        recorded,
        task="text-generation",
        model_id=model_id,
    )
    assert pub.publishable, pub.skipped
    hub = tmp_path / "hub"
    written = write_tree([pub], hub)
    assert pub.registry_path in written and sum(p.endswith("model.neff") for p in written) == 2

    # optimum-neuron's export-side entry, from the exported configs: the same file, name and folder.
    config = AutoConfig.from_pretrained(job.artifacts_dir)
    neuron_config = NxDNeuronConfig.from_pretrained(job.artifacts_dir)
    theirs = SingleModelCacheEntry(model_id, "text-generation", config, neuron_config)
    ours_text = (hub / pub.registry_path).read_text()
    assert theirs.serialize() == ours_text
    *_, digest, name = pub.registry_path.split("/")
    assert (theirs.arch_digest(), theirs.hash + ".json") == (digest, name)
    assert ModelCacheEntry.deserialize(ours_text).hash == theirs.hash

    # optimum-neuron's lookup, for the model directory, reading the published tree as the cache repository.
    repo = "example-org/neuron-cache-from-neuronc"
    directory_hub = _DirectoryHub(hub, repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_tree", directory_hub.list_repo_tree)
    monkeypatch.setattr(huggingface_hub.HfApi, "hf_hub_download", directory_hub.hf_hub_download)
    found = get_hub_cached_entries(str(tmp_path / "model"), task="text-generation", cache_repo_id=repo)
    assert [(e["batch_size"], e["sequence_length"], e["tp_degree"], e["torch_dtype"], e["target"]) for e in found] == [
        (4, 128, 2, "float32", "trn1")
    ]
