"""The deploy emitters against the upstream facts a re-audit found (issue 21 item 5).

Sources for each fact are in the module under test; every test here failed before its fix.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from test_deploy import FULL, SEQ, _bundle, _env, _exec_argv, _files, _flags, _scenario

from neuronc.deploy import DeployOptions, render
from neuronc.deploy import images as image_table
from neuronc.deploy._values import ServingValues
from neuronc.deploy.optimum import entrypoint_argv
from neuronc.deploy.sagemaker import sagemaker_instance
from neuronc.deploy.sagemaker_instance_types import BOTOCORE_VERSION, PRODUCTION_VARIANT_INSTANCE_TYPES
from neuronc.deploy.vllm import DLC_HEALTHCHECK_URL
from neuronc.errors import InvalidInputError
from neuronc.spec import ResolvedSequence

NXDI_2_28 = {"neuronx-cc": "2.23.6484.0+3b612583", "neuronx-distributed-inference": "0.8.16251+f3ca5575"}


# -- f: the AWS vLLM DLC health check and the port vLLM serves on -------------------------------------


def test_vllm_compose_serves_on_the_port_the_dlc_health_check_polls(tmp_path: Path) -> None:
    """The DLC's HEALTHCHECK curls localhost:8080/ping; vLLM serves /ping on its --port (default 8000)."""
    bundle = _bundle(tmp_path, "nxdi", toolchain=NXDI_2_28, tp_degree=4, sequence=FULL)
    rendered = render(bundle, "vllm", DeployOptions(instance_type="inf2.48xlarge", replicas=2))
    assert rendered.image is not None and rendered.image.startswith("public.ecr.aws/neuron/")
    files = _files(rendered)
    compose = yaml.safe_load(files["docker-compose.yml"])
    health_port = urlsplit(DLC_HEALTHCHECK_URL).port
    assert health_port == 8080
    replicas = {k: s for k, s in compose["services"].items() if k != "nginx"}
    assert len(replicas) == 2
    for name, service in replicas.items():
        assert service["command"][:2] == ["vllm", "serve"]
        assert _flags(service["command"][2:])["--port"] == str(health_port)
        assert service["expose"] == [str(health_port)]
        assert re.search(rf"server {name}:{health_port} ", files["nginx.conf"])
        # no override that would make the image's own check poll another port
        assert "healthcheck" not in service or str(health_port) in " ".join(service["healthcheck"]["test"])


# -- b: trn2 at LNC 1 must tell the runtime (default LNC 2 on trn2) ---------------------------------


def _serve_env(script: str, sourced: dict[str, str]) -> dict[str, str]:
    """What serve.sh's exec sees: its ``export`` lines plus the env file it sources."""
    env = dict(sourced)
    for line in script.splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = shlex.split(value)[0]
    return env


@pytest.mark.parametrize("lnc", [1, 2])
def test_trn2_vllm_bundle_sets_the_compiled_lnc_at_run_time(tmp_path: Path, lnc: int) -> None:
    bundle = _bundle(
        tmp_path, "nxdi", toolchain=NXDI_2_28, target="trn2", batch_size=1, options={"logical_nc_config": lnc}
    )
    files = _files(render(bundle, "vllm", DeployOptions(instance_type="trn2.48xlarge", replicas=1)))
    assert _serve_env(files["serve.sh"], _env(files["vllm.env"]))["NEURON_LOGICAL_NC_CONFIG"] == str(lnc)
    service = yaml.safe_load(files["docker-compose.yml"])["services"]["vllm-0"]
    assert service["environment"]["NEURON_LOGICAL_NC_CONFIG"] == str(lnc)


def test_trn2_optimum_bundle_sets_lnc_1_in_compose_serve_sh_and_sagemaker(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "optimum-neuron", target="trn2", sequence=FULL, options={"logical_nc_config": 1})
    files = _files(render(bundle, "vllm", DeployOptions(instance_type="trn2.48xlarge", replicas=1)))
    assert _serve_env(files["serve.sh"], {})["NEURON_LOGICAL_NC_CONFIG"] == "1"
    service = yaml.safe_load(files["docker-compose.yml"])["services"]["vllm-0"]
    assert service["environment"]["NEURON_LOGICAL_NC_CONFIG"] == "1"
    options = DeployOptions(instance_type="ml.trn2.48xlarge", region="us-east-1")
    model = json.loads(_files(render(bundle, "sagemaker", options))["create-model.json"])
    assert model["PrimaryContainer"]["Environment"]["NEURON_LOGICAL_NC_CONFIG"] == "1"


def test_inf2_bundles_set_no_lnc(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "nxdi", toolchain=NXDI_2_28, tp_degree=4, sequence=FULL)
    files = _files(render(bundle, "vllm", DeployOptions(instance_type="inf2.48xlarge", replicas=1)))
    assert "NEURON_LOGICAL_NC_CONFIG" not in files["vllm.env"] + files["docker-compose.yml"]


# -- c: SageMaker image regions ---------------------------------------------------------------------


@pytest.mark.parametrize("region", ["cn-north-1", "us-gov-west-1", "af-south-1", "eu-west-2", "ap-southeast-3"])
def test_sagemaker_refuses_a_region_without_the_vllm_dlc(tmp_path: Path, region: str) -> None:
    """The vLLM neuronx DLC exists in 11 regions (sagemaker-python-sdk huggingface-vllm-neuronx.json);
    elsewhere 763104351884.dkr.ecr.<region>.amazonaws.com would be a wrong (or non-existent) image."""
    bundle = _bundle(tmp_path, "optimum-neuron", tp_degree=2, sequence=FULL)
    with pytest.raises(InvalidInputError, match=rf"--region {region}: .* published only in .*us-east-1") as info:
        render(bundle, "sagemaker", DeployOptions(region=region))
    assert "--image" in (info.value.hint or "")
    assert info.value.exit_code == 2


def test_sagemaker_region_with_an_image_given_and_china_domain(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "optimum-neuron", tp_degree=2, sequence=FULL)
    image = "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/my-vllm:1"
    rendered = render(bundle, "sagemaker", DeployOptions(region="cn-north-1", image=image))
    assert json.loads(_files(rendered)["create-model.json"])["PrimaryContainer"]["Image"] == image
    assert "runtime.sagemaker.cn-north-1.amazonaws.com.cn" in " ".join(
        rendered.notes + tuple(_files(rendered).values())
    )


@pytest.mark.parametrize("region", image_table.SAGEMAKER_VLLM_REGIONS)
def test_sagemaker_names_the_dlc_in_each_of_its_regions(tmp_path: Path, region: str) -> None:
    bundle = _bundle(tmp_path, "optimum-neuron", tp_degree=2, sequence=FULL)
    image = render(bundle, "sagemaker", DeployOptions(region=region)).image
    assert image == (
        f"763104351884.dkr.ecr.{region}.amazonaws.com/huggingface-vllm-inference-neuronx:"
        "0.11.0-optimum0.4.5-neuronx-py310-sdk2.26.1-ubuntu22.04"
    )
    assert len(image_table.SAGEMAKER_VLLM_REGIONS) == 11


# -- a: what each optimum-neuron 0.4.x `optimum-cli neuron serve` accepts -------------------------------

# ServeCommand.parse_args options, read from each wheel's optimum/commands/neuron/serve.py (0.4.0 L49-87,
# 0.4.1 L48-86, 0.4.2 L64-103, 0.4.4 L66-107 adds dash aliases, 0.4.5 adds --task). Before 0.4.2 optimum
# 1.24's `optimum-cli` calls parser.parse_args(): any other argument exits 2; from 0.4.2 unknown
# arguments are kept and handed to vLLM.
_SERVE_OPTIONS = {
    "0.4.0": ("--model", "--dtype", "--tensor_parallel_size", "--batch_size", "--sequence_length", "--port"),
    "0.4.1": (
        "--model",
        "--served_model_name",
        "--tensor_parallel_size",
        "--batch_size",
        "--sequence_length",
        "--port",
    ),
}
_SERVE_OPTIONS["0.4.2"] = _SERVE_OPTIONS["0.4.3"] = _SERVE_OPTIONS["0.4.4"] = _SERVE_OPTIONS["0.4.5"] = _SERVE_OPTIONS[
    "0.4.1"
]
_OPTIMUM_CC = {"0.4.0": "2.21.18209.0", "0.4.1": "2.21.18209.0", "0.4.2": "2.21.18209.0"}


def _serve_parse(version: str, argv: list[str]) -> argparse.Namespace:
    """Parse ``optimum-cli neuron serve`` arguments as that version does (strict before 0.4.2)."""
    parser = argparse.ArgumentParser(prog="optimum-cli neuron serve", exit_on_error=False)
    for option in _SERVE_OPTIONS[version]:
        parser.add_argument(option, required=option == "--model")
    parser.add_argument("--allow_non_cached_model", action="store_true")
    if version in ("0.4.0", "0.4.1"):
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # what parser.parse_args() does with them: "unrecognized arguments", exit 2
            raise argparse.ArgumentError(None, f"unrecognized arguments: {' '.join(unknown)}")
        return args
    args, unknown = parser.parse_known_args(argv)
    args.unknown = unknown
    return args


def _walk(node: object) -> list[dict[str, object]]:
    """Every mapping in a JSON document."""
    if isinstance(node, dict):
        return [node, *(m for value in node.values() for m in _walk(value))]
    if isinstance(node, list):
        return [m for item in node for m in _walk(item)]
    return []


def _optimum_bundle(tmp_path: Path, version: str, sequence: ResolvedSequence = FULL) -> Path:
    toolchain = {"optimum-neuron": version, "neuronx-cc": _OPTIMUM_CC.get(version, "2.21.33363.0")}
    return _bundle(tmp_path, "optimum-neuron", toolchain=toolchain, sequence=sequence, tp_degree=2)


@pytest.mark.parametrize("version", sorted(_SERVE_OPTIONS))
def test_optimum_serve_arguments_are_those_the_version_accepts(tmp_path: Path, version: str) -> None:
    rendered = render(_optimum_bundle(tmp_path, version), "vllm", DeployOptions(instance_type="inf2.24xlarge"))
    assert rendered.image == f"ghcr.io/huggingface/optimum-neuron-vllm:{version}"
    files = _files(rendered)
    env = yaml.safe_load(files["docker-compose.yml"])["services"]["vllm-0"]["environment"]
    container = _serve_parse(version, entrypoint_argv(env)[3:])
    host = _serve_parse(version, _exec_argv(files["serve.sh"])[3:])
    for args in (container, host):
        assert (args.tensor_parallel_size, args.batch_size, args.sequence_length) == ("2", "4", "4096")
    model = [b["model"] for b in _walk(_scenario(files)) if b.get("kind") == "openai_http"]
    if version == "0.4.0":
        assert "served_model_name" not in vars(container)
        # vLLM answers to the --model path: the benchmark asks for that name
        assert model == ["/bundle/artifacts"] and "/bundle/artifacts" in rendered.notes[0]
    else:
        assert container.served_model_name == host.served_model_name == "meta-llama/Llama-3.1-8B"
        assert model == ["meta-llama/Llama-3.1-8B"]


@pytest.mark.parametrize("version", ["0.4.0", "0.4.1"])
def test_optimum_before_0_4_2_cannot_cap_a_shorter_context_and_is_refused(tmp_path: Path, version: str) -> None:
    bundle = _optimum_bundle(tmp_path, version, SEQ)
    with pytest.raises(InvalidInputError, match=r"pass-through to vLLM starts in 0\.4\.2") as info:
        render(bundle, "vllm")
    assert "0.4.2" in (info.value.hint or "")


def test_optimum_0_4_2_passes_the_context_cap_through(tmp_path: Path) -> None:
    files = _files(render(_optimum_bundle(tmp_path, "0.4.2", SEQ), "vllm"))
    env = yaml.safe_load(files["docker-compose.yml"])["services"]["vllm-0"]["environment"]
    assert _serve_parse("0.4.2", entrypoint_argv(env)[3:]).unknown == ["--max_model_len", "2048"]


# -- d: SageMaker's ProductionVariantInstanceType enum ------------------------------------------------


def _sagemaker_instance(tmp_path: Path, options: DeployOptions, **overrides: object) -> str:
    bundle = _bundle(tmp_path, "optimum-neuron", sequence=FULL, **overrides)
    config = json.loads(_files(render(bundle, "sagemaker", options))["create-endpoint-config.json"])
    name = config["ProductionVariants"][0]["InstanceType"]
    assert isinstance(name, str)
    return name


def test_sagemaker_default_for_a_small_trn2_bundle_is_in_the_enum(tmp_path: Path) -> None:
    """tp 4 on trn2 fits trn2.3xlarge, which SageMaker endpoints do not offer: ml.trn2.48xlarge."""
    name = _sagemaker_instance(tmp_path, DeployOptions(), target="trn2", tp_degree=4)
    assert name == "ml.trn2.48xlarge"
    assert name in PRODUCTION_VARIANT_INSTANCE_TYPES


@pytest.mark.parametrize("given", ["ml.trn2.3xlarge", "trn2.3xlarge", "ml.trn3.48xlarge"])
def test_sagemaker_refuses_an_instance_type_outside_the_enum(tmp_path: Path, given: str) -> None:
    bundle = _bundle(tmp_path, "optimum-neuron", sequence=FULL, target="trn2", tp_degree=4)
    with pytest.raises(InvalidInputError, match=rf"--instance-type {re.escape(given)}: not an instance type Sage") as e:
        render(bundle, "sagemaker", DeployOptions(instance_type=given))
    assert "ml.trn2.48xlarge" in (e.value.hint or "") and "ProductionVariantInstanceType" in (e.value.hint or "")


def test_sagemaker_accepts_trn1n(tmp_path: Path) -> None:
    name = _sagemaker_instance(tmp_path, DeployOptions(instance_type="ml.trn1n.32xlarge"), target="trn1")
    assert name == "ml.trn1n.32xlarge"


def test_the_recorded_enum_names_its_botocore_and_every_default_is_in_it() -> None:
    from neuronc.hardware import INSTANCE_TYPES

    assert re.fullmatch(r"\d+\.\d+\.\d+", BOTOCORE_VERSION)
    assert "ml.trn2.3xlarge" not in PRODUCTION_VARIANT_INSTANCE_TYPES
    assert not [n for n in PRODUCTION_VARIANT_INSTANCE_TYPES if n.startswith("ml.trn3")]
    for target in {i.target for i in INSTANCE_TYPES}:
        for tp in (1, 2, 8):
            name, _ = sagemaker_instance(_values(target, tp), DeployOptions())
            assert name in PRODUCTION_VARIANT_INSTANCE_TYPES


def _values(target: str, tp: int) -> ServingValues:
    return ServingValues(
        bundle="/b",
        model_id="m",
        backend="optimum-neuron",
        target=target,
        tp_degree=tp,
        batch_size=1,
        amp="bf16",
        max_length=128,
        max_context_length=128,
        context_buckets=(128,),
        config_hash="0" * 12,
        weights="presharded",
        toolchain={},
    )
