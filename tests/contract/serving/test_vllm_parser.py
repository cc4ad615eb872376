"""The emitted ``vllm serve`` arguments parse with vLLM's own argument parser, at the version installed
(the runner script runs this file with vLLM 0.11.0, what vllm-neuron 0.2 pins, and 0.13.0, what
vllm-neuron 0.4.1 in Neuron SDK 2.28 pins), and every emitted environment name is one that exists.

vLLM is installed without its dependencies (only what its parser imports); ``DeviceConfig``'s
default needs a current platform, which on a Neuron host is the vllm-neuron plugin's
``NeuronPlatform`` (device_type "cpu", vllm-neuron ``vllm_neuron/platform.py``). The plugin is not
installable from PyPI (``vllm-neuron`` there is a 5-file placeholder), so a stand-in with the
same device type and control variable is set as the current platform: the only test double here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

vllm = pytest.importorskip("vllm", reason="vLLM is on PYTHONPATH only in the runner's vLLM passes")

from neuronc.deploy import DeployOptions, render  # noqa: E402
from neuronc.deploy.optimum import entrypoint_argv, sm_on_env  # noqa: E402

# Environment names the vllm-neuron plugin reads (vllm_neuron/worker/neuronx_distributed_model_loader.py,
# vllm_neuron/platform.py at 0.2.0); checked against that source when VLLM_NEURON_SRC points at a checkout.
PLUGIN_ENV = {"NEURON_COMPILED_ARTIFACTS", "NEURON_RT_VISIBLE_CORES", "NEURON_ON_DEVICE_SAMPLING_DISABLED"}


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
    from vllm.entrypoints.openai.cli_args import make_arg_parser

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser  # 0.13
    except ImportError:
        from vllm.utils import FlexibleArgumentParser  # type: ignore[attr-defined,no-redef]  # 0.11
    return make_arg_parser(FlexibleArgumentParser())


def _engine_args(parser: Any, argv: list[str]) -> Any:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.openai.cli_args import validate_parsed_serve_args

    namespace = parser.parse_args(argv)
    validate_parsed_serve_args(namespace)
    return AsyncEngineArgs.from_cli_args(namespace)


def test_the_parser_is_vllms_own(parser: Any) -> None:
    """The parser refuses what vLLM refuses: --block-size outside its short list (the seed emitter's bug)."""
    with pytest.raises(SystemExit):
        parser.parse_args(["--model", "m", "--block-size", "4096"])
    assert vllm.__version__ in ("0.11.0", "0.13.0"), vllm.__version__


@pytest.mark.parametrize("name", ["llama3.1-8b-instruct-nxdi-inf2+vllm"])
def test_nxdi_serve_arguments_parse_and_keep_the_compiled_values(
    parser: Any, shipped: dict[str, Path], name: str
) -> None:
    from neuronc.bundle import read_manifest

    bundle = shipped[name]
    manifest = read_manifest(bundle)
    rendered = render(bundle, "vllm", DeployOptions(image="registry.example/vllm-neuron:test"))
    files = {f.path: f.text for f in rendered.files}
    line = next(li for li in files["serve.sh"].splitlines() if li.startswith("exec vllm serve "))
    import shlex

    argv = shlex.split(line)[3:]  # after `exec vllm serve`
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
    import yaml

    service = yaml.safe_load(files["docker-compose.yml"])["services"]["vllm-0"]
    container = _engine_args(parser, ["--model", service["command"][2], *service["command"][3:]])
    assert container.model == "/bundle/model"
    for field in ("max_num_seqs", "max_model_len", "tensor_parallel_size", "dtype", "enable_prefix_caching"):
        assert getattr(container, field) == getattr(args, field), field
    assert container.num_gpu_blocks_override == args.num_gpu_blocks_override


def _names_in_source(root: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in root.rglob("*.py"))


def test_every_emitted_environment_name_exists(shipped: dict[str, Path]) -> None:
    import vllm.envs as envs

    emitted: set[str] = set()
    for name in ("llama3.1-8b-instruct-nxdi-inf2+vllm",):
        rendered = render(shipped[name], "vllm", DeployOptions(image="registry.example/x:y"))
        for f in rendered.files:
            if f.path == "vllm.env":
                emitted |= {li.split("=", 1)[0] for li in f.text.splitlines() if "=" in li}
    assert emitted, "no environment emitted"
    vllm_names = set(envs.environment_variables)
    for key in emitted:
        if key.startswith("VLLM_"):
            assert key in vllm_names, f"{key} is not in vLLM {vllm.__version__}'s envs.py"
        else:
            assert key in PLUGIN_ENV, f"{key}: not an environment name vllm-neuron reads"
            assert key not in vllm_names
    source = os.environ.get("VLLM_NEURON_SRC")
    if source:
        text = _names_in_source(Path(source) / "vllm_neuron")
        for key in emitted - {k for k in emitted if k.startswith("VLLM_")}:
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
