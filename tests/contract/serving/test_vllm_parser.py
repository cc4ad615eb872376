"""The emitted ``vllm serve`` arguments parse with vLLM's own argument parser, at the version installed,
and every emitted environment name is one that exists.

The runner script runs this file once per vLLM version a supported image pins: 0.11.0, 0.13.0 and
0.16.0 (the NxD Inference path of vllm-neuron 0.2.x-0.5.x, SDK 2.27.0-2.31.1) and 0.21.0, 0.24.0
and 0.29.0 (vllm-neuron's torch.compile path, SDK 2.31-2.33). Each pass checks the bundles that
version serves (``cases``): an NxD Inference bundle rendered for each image of the support matrix
that pins this vLLM, and the vllm-neuron bundle of the release whose image pins it.

vLLM is installed without its dependencies (only what its parser imports); ``DeviceConfig``'s
default needs a current platform, which on a Neuron host is the vllm-neuron plugin's
``NeuronPlatform`` (device_type "cpu", vllm-neuron ``vllm_neuron/platform.py``). The plugin is not
installable from PyPI (``vllm-neuron`` there is a 5-file placeholder), so a stand-in with the
same device type and control variable is set as the current platform: the only test double here.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

vllm = pytest.importorskip("vllm", reason="vLLM is on PYTHONPATH only in the runner's vLLM passes")

from _vllm_neuron_bundles import VLLM_NEURON_RELEASES  # noqa: E402

from neuronc.backends.support import Serves, find_release, releases  # noqa: E402
from neuronc.deploy import DeployOptions, render  # noqa: E402
from neuronc.deploy.optimum import entrypoint_argv, sm_on_env  # noqa: E402

# Environment names the vllm-neuron plugin reads: the NxDI path (vllm_neuron/worker/
# neuronx_distributed_model_loader.py, vllm_neuron/platform.py at 0.2.0) and the torch.compile path
# (neuronc.backends.vllm_neuron.facts, each with its source); checked against the plugin's source
# when VLLM_NEURON_SRC points at a checkout.
PLUGIN_ENV = {
    "NEURON_COMPILED_ARTIFACTS",
    "NEURON_RT_VISIBLE_CORES",
    "NEURON_ON_DEVICE_SAMPLING_DISABLED",
    "NEURON_LOGICAL_NC_CONFIG",
    "VLLM_NEURON_DISABLE_WARMUP_COMPILE",
    "VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION",
    "VLLM_NEURON_MIN_KV_BUDGET_GIB",
    # The route and the second no-compile switch, per plugin line (facts.ROUTE_ENV, facts.PLUGIN_ENV).
    "VLLM_NEURON_BACKEND",
    "VLLM_NEURON_DISABLE_GRAPH_CAPTURE_BACKEND",
    "NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND",
    # The platform target the plugin's cache key names (0.21 fork compile/cache.py, facts.TARGET_ENV).
    "NEURON_PLATFORM_TARGET_OVERRIDE",
}
VERSION = vllm.__version__.split("+")[0]
NXDI_IMAGES = [i for r in releases() for i in r.images_serving(Serves.NXDI)]


def _plugin_vllm(release: str) -> str | None:
    row = find_release(release)
    images = row.images_serving(Serves.VLLM_NEURON) if row else ()
    return images[0].vllm if images else None


def cases(version: str) -> list[tuple[str, str]]:
    """(kind, what) for each bundle ``version`` serves: ("nxdi", image reference), ("vllm-neuron", release)."""
    found = [("nxdi", i.reference) for i in NXDI_IMAGES if i.vllm == version]
    return found + [("vllm-neuron", r) for r in VLLM_NEURON_RELEASES if _plugin_vllm(r) == version]


SERVED = sorted({i.vllm for i in NXDI_IMAGES if i.vllm} | {v for r in VLLM_NEURON_RELEASES if (v := _plugin_vllm(r))})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        found = cases(VERSION)
        metafunc.parametrize("case", found, ids=[f"{kind}-{what.rsplit(':', 1)[-1]}" for kind, what in found])


def _cli_args() -> Any:
    try:
        import vllm.entrypoints.openai.cli_args as module  # 0.11.0 - 0.24.0
    except ModuleNotFoundError:
        import vllm.entrypoints.launchers.cli_args as module  # type: ignore[no-redef]  # 0.29.0
    return module


@pytest.fixture(scope="module")
def parser() -> Any:
    import vllm.platforms as platforms
    from vllm.platforms.interface import Platform, PlatformEnum

    class NeuronPlatformStandIn(Platform):
        _enum = PlatformEnum.OOT
        device_name = "cpu"
        device_type = "cpu"
        dispatch_key = "CPU"
        device_control_env_var = "NEURON_RT_VISIBLE_CORES"

    platforms._current_platform = NeuronPlatformStandIn()
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser  # 0.13
    except ImportError:
        from vllm.utils import FlexibleArgumentParser  # type: ignore[attr-defined,no-redef]  # 0.11
    return _cli_args().make_arg_parser(FlexibleArgumentParser())


def _engine_args(parser: Any, argv: list[str], *, port: int | None = None) -> Any:
    """``vllm serve``'s path from argv to EngineArgs; ``port``: the server's port it must parse to."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    namespace = parser.parse_args(argv)
    _cli_args().validate_parsed_serve_args(namespace)
    if port is not None:
        assert namespace.port == port
    return AsyncEngineArgs.from_cli_args(namespace)


def test_the_parser_is_vllms_own(parser: Any) -> None:
    """The parser refuses what this vLLM refuses: NxDI's --override-neuron-config (absent in every version
    served), and --block-size outside the short list it had up to 0.16 (the seed emitter's bug)."""
    assert VERSION in SERVED, (VERSION, SERVED)
    with pytest.raises(SystemExit):
        parser.parse_args(["--model", "m", "--override-neuron-config", "{}"])
    if VERSION in ("0.11.0", "0.13.0", "0.16.0"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--model", "m", "--block-size", "4096"])


# What engine_cli writes after each kind of flag (neuronc.backends.vllm_neuron.engine.ENGINE_FIELDS), and
# what the parser must make of it.
_SAMPLES: dict[str, tuple[list[str], Any]] = {
    "int": (["16"], 16),
    "float": (["0.5"], 0.5),
    "name": (["bfloat16"], "bfloat16"),
    "names": (["acme/tiny"], ["acme/tiny"]),
    "json": (['{"neuron_config":{"num_seqs_buckets":[1]}}'], {"neuron_config": {"num_seqs_buckets": [1]}}),
}


def test_every_flag_deploy_lets_through_is_this_vllms_own(parser: Any) -> None:
    """Issue 34 item 4: deploy writes only the recorded flags that ``engine_cli`` can write
    (``engine.served_flags``, from ``ENGINE_FIELDS``), exactly. At each vLLM a vllm-neuron image pins,
    each of them is this parser's own flag for that very EngineArgs field (were it only a prefix of a
    longer flag, argparse would set that other field) and takes the value ``engine_cli`` writes after it."""
    from neuronc.backends.vllm_neuron.engine import ENGINE_FIELDS, engine_args_problem, served_flags

    if not any(kind == "vllm-neuron" for kind, _ in cases(VERSION)):
        pytest.skip(f"no vllm-neuron image pins vLLM {VERSION}")
    for flag, field in served_flags().items():
        kind = ENGINE_FIELDS[field]
        values, expected = _SAMPLES[kind] if kind != "switch" else ([], not flag.startswith("--no-"))
        assert engine_args_problem([flag, *values]) is None, flag
        namespace = parser.parse_args(["--model", "m", flag, *values])
        assert getattr(namespace, field) == expected, (flag, getattr(namespace, field, None))


def _serve_argv(script: str) -> list[str]:
    line = next(li for li in script.splitlines() if li.startswith("exec vllm serve "))
    return shlex.split(line)[3:]  # after `exec vllm serve`


def _check_nxdi(parser: Any, bundle: Path, image: str) -> None:
    from neuronc.bundle import read_manifest

    manifest = read_manifest(bundle)
    rendered = render(bundle, "vllm", DeployOptions(image=image))
    files = {f.path: f.text for f in rendered.files}
    argv = _serve_argv(files["serve.sh"])
    args = _engine_args(parser, ["--model", argv[0], *argv[1:]])
    seq = manifest.profile["sequence"]
    assert args.model == f"{bundle}/model"
    assert args.max_num_seqs == manifest.profile["batch_size"]
    assert args.max_model_len == max(seq["context_buckets"])
    assert args.tensor_parallel_size == manifest.profile["tp_degree"]
    assert args.dtype == "bfloat16"
    assert args.enable_prefix_caching is False
    assert args.num_gpu_blocks_override == manifest.profile["batch_size"]
    assert args.block_size is None  # vllm-neuron sets it to max_model_len
    # The same arguments in the compose file's container command.
    service = yaml.safe_load(files["docker-compose.yml"])["services"]["vllm-0"]
    assert service["image"] == image
    container = _engine_args(parser, ["--model", service["command"][2], *service["command"][3:]], port=8080)
    assert container.model == "/bundle/model"
    for field in ("max_num_seqs", "max_model_len", "tensor_parallel_size", "dtype", "enable_prefix_caching"):
        assert getattr(container, field) == getattr(args, field), field
    assert container.num_gpu_blocks_override == args.num_gpu_blocks_override


def _check_vllm_neuron(parser: Any, bundle: Path, release: str) -> None:
    from neuronc.bundle import read_manifest

    manifest = read_manifest(bundle)
    info = manifest.extra["vllm_neuron"]
    recorded = info["engine_kwargs"]
    rendered = render(bundle, "vllm")
    assert rendered.image == info["runner"]["pinned"]
    files = {f.path: f.text for f in rendered.files}
    for argv in (
        _serve_argv(files["serve.sh"]),
        yaml.safe_load(files["docker-compose.yml"])["services"]["vllm-0"]["command"][6:],
    ):
        args = _engine_args(parser, ["--model", argv[0], *argv[1:]], port=8080)
        assert args.model.endswith("/artifacts/checkpoint")
        # Every value the compile's vllm.LLM got reaches the server's EngineArgs unchanged.
        for field, value in recorded.items():
            if field in ("model", "tokenizer"):
                continue
            assert getattr(args, field) == value, (field, getattr(args, field), value)
    assert info["release"] == release


def test_serve_arguments_parse_and_keep_the_compiled_values(
    parser: Any, case: tuple[str, str], shipped: dict[str, Path], vllm_neuron_bundles: dict[str, Path]
) -> None:
    kind, what = case
    if kind == "nxdi":
        _check_nxdi(parser, shipped["llama3.1-8b-instruct-nxdi-inf2+vllm"], what)
    else:
        _check_vllm_neuron(parser, vllm_neuron_bundles[f"vllm-neuron-{what}"], what)


def _names_in_source(root: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in root.rglob("*.py"))


def test_every_emitted_environment_name_exists(shipped: dict[str, Path], vllm_neuron_bundles: dict[str, Path]) -> None:
    """vLLM's own names are in this vLLM's envs.py; the others are names the plugin reads."""
    import vllm.envs as envs

    bundles = [shipped["llama3.1-8b-instruct-nxdi-inf2+vllm"]] if VERSION in {i.vllm for i in NXDI_IMAGES} else []
    bundles += [vllm_neuron_bundles[f"vllm-neuron-{r}"] for kind, r in cases(VERSION) if kind == "vllm-neuron"]
    emitted: set[str] = set()
    recorded: set[str] = set()  # a compile's own VLLM_NEURON_*/NEURON_* variables, replayed as they were
    for bundle in bundles:
        from neuronc.bundle import read_manifest

        info = read_manifest(bundle).extra.get("vllm_neuron") or {}
        recorded |= set(info.get("compile_env") or {})
        rendered = render(bundle, "vllm", DeployOptions(image="registry.example/x:y"))
        for f in rendered.files:
            if f.path == "vllm.env":
                emitted |= {li.split("=", 1)[0] for li in f.text.splitlines() if "=" in li}
            if f.path == "docker-compose.yml":
                emitted |= set(yaml.safe_load(f.text)["services"]["vllm-0"].get("environment") or {})
    assert emitted, "no environment emitted"
    vllm_names = set(envs.environment_variables)
    for key in emitted - recorded:
        if key in PLUGIN_ENV:
            assert key not in vllm_names, f"{key} is vLLM's, not the plugin's"
        else:
            assert key in vllm_names, f"{key} is not in vLLM {vllm.__version__}'s envs.py nor a plugin name"
    source = os.environ.get("VLLM_NEURON_SRC")
    if source:
        text = _names_in_source(Path(source) / "vllm_neuron")
        for key in emitted & PLUGIN_ENV:
            assert re.search(rf"\b{key}\b", text), f"{key} is not in {source}"


def test_optimum_container_command_parses_with_vllms_parser(parser: Any, shipped: dict[str, Path]) -> None:
    """What optimum-cli neuron serve hands to vLLM for the emitted SM_ON_* variables.

    optimum-neuron 0.4.5 ``optimum/commands/neuron/serve.py`` (run): ``--model``, ``--served_model_name``,
    ``--task``, ``--port``, ``--tensor-parallel-size``, ``--max-num-seqs``, ``--max-model-len``,
    ``--dtype`` from its own options, then the arguments it did not know. That assembly is mirrored
    here (it sits behind a Neuron-device check); the arguments themselves go through vLLM's parser.
    """
    from neuronc.bundle import read_manifest
    from neuronc.deploy._values import serving_values

    if not vllm.__version__.startswith("0.11."):
        pytest.skip("optimum-neuron 0.4.x pins vLLM 0.11.0")

    bundle = shipped["llama3.1-8b-optimum-neuron-tgi"]
    values = serving_values(read_manifest(bundle), bundle)
    argv = entrypoint_argv(sm_on_env(values, "/bundle/artifacts"))[3:]
    known = {"--port", "--model", "--served_model_name", "--tensor_parallel_size", "--batch_size", "--sequence_length"}
    pairs = dict(zip(argv[::2], argv[1::2], strict=True))
    unknown = [x for k, v in pairs.items() if k not in known for x in (k, v)]
    command = [
        "--model", pairs["--model"], "--served_model_name", pairs["--served_model_name"], "--port", pairs["--port"],
        "--tensor-parallel-size", pairs["--tensor_parallel_size"], "--max-num-seqs", pairs["--batch_size"],
        "--max-model-len", pairs["--sequence_length"], "--dtype", "bfloat16", *unknown,
    ]  # fmt: skip
    args = _engine_args(parser, command)
    assert args.max_num_seqs == values.batch_size
    assert args.max_model_len == min(values.max_length, values.longest_prompt)
