"""SageMaker: an endpoint for an optimum-neuron bundle uploaded to S3 uncompressed.

NxD Inference and vllm-neuron bundles of SDK 2.27+ are refused with the way to serve them
(``vllm_dlc_refusal``): the AWS vLLM containers have no SageMaker serving integration.

The container family follows the bundle's optimum-neuron version (``images.py``): for 0.4.x the
Hugging Face vLLM neuronx inference container, configured with ``SM_ON_*`` variables (its
entrypoint passes them to ``optimum-cli neuron serve``; optimum-neuron ``docker/vllm/Dockerfile``).
SageMaker copies an ``S3Prefix`` model into ``/opt/ml/model``. The request files are the inputs of
``aws sagemaker create-model / create-endpoint-config / create-endpoint --cli-input-json``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from packaging.version import Version

from neuronc.backends.support import Release, Serves, detect_releases, find_release, releases
from neuronc.deploy._types import DeployOptions, EmittedFile, Rendered, Stack
from neuronc.deploy._values import ServingValues
from neuronc.deploy.benchmark import Endpoint, benchmark_files
from neuronc.deploy.images import HF_DLC_ACCOUNT, SAGEMAKER_VLLM_REGIONS, choose_image, public
from neuronc.deploy.optimum import sm_on_env
from neuronc.deploy.sagemaker_instance_types import BOTOCORE_VERSION, PRODUCTION_VARIANT_INSTANCE_TYPES
from neuronc.errors import InvalidInputError
from neuronc.hardware import InstanceType

MODEL_DIR = "/opt/ml/model"
PLACEHOLDER_S3 = "s3://YOUR-BUCKET/neuronc/{name}/"
PLACEHOLDER_ROLE = "arn:aws:iam::123456789012:role/YOUR-SAGEMAKER-ROLE"
VERSIONS = ("optimum-neuron", "neuronx-cc")
GIB = 1024**3
# SageMaker's limits for both timeouts (ProductionVariant: 60 to 3600 seconds).
MIN_TIMEOUT_S, MAX_TIMEOUT_S = 60, 3600


def timeouts(v: ServingValues) -> tuple[int, int]:
    """(model data download, container start-up health check) seconds, sized to the bundle.

    Download: 5 minutes plus 30 s per GiB of S3 objects. Start-up: 10 minutes plus 60 s per GiB
    for loading the weights onto the NeuronCores; both within SageMaker's 60-3600 s.
    """
    gib = v.bundle_bytes / GIB
    download = int(300 + 30 * gib)
    startup = int(600 + 60 * gib)
    return (max(MIN_TIMEOUT_S, min(MAX_TIMEOUT_S, download)), max(MIN_TIMEOUT_S, min(MAX_TIMEOUT_S, startup)))


def _image(v: ServingValues, options: DeployOptions) -> str:
    if options.image:
        return options.image
    if not (public(v.version("optimum-neuron")) or "").startswith("0.4."):
        msg = (
            f"SageMaker: neuronc knows containers for optimum-neuron 0.4.x exports only; this bundle was "
            f"exported with optimum-neuron {v.version('optimum-neuron') or 'unknown'}"
        )
        raise InvalidInputError(msg, hint="deploy it with --for tgi on EC2, or pass --image with a container for it")
    image = choose_image("sagemaker-vllm", v.toolchain, VERSIONS).image
    if options.region not in SAGEMAKER_VLLM_REGIONS:
        msg = (
            f"--region {options.region}: the Hugging Face vLLM neuronx SageMaker container is published only in "
            f"{', '.join(SAGEMAKER_VLLM_REGIONS)} (ECR account {HF_DLC_ACCOUNT})"
        )
        hint = "deploy in one of those regions, or pass --image with a container copied to your region's ECR"
        raise InvalidInputError(msg, hint=hint)
    return image.format(region=options.region)


# The backends whose bundles the AWS vLLM containers serve (``--for vllm``), by the kind of image.
VLLM_DLC_BACKENDS = {"nxdi": Serves.NXDI, "vllm-neuron": Serves.VLLM_NEURON}
FIRST_VLLM_DLC_RELEASE = "2.27.0"  # the first release whose vLLM image runs the vllm-neuron plugin


def _bundle_releases(backend: str, toolchain: Mapping[str, str | None], extra: Mapping[str, Any]) -> list[Release]:
    record = extra.get("vllm_neuron")
    recorded = find_release(str(record.get("release"))) if isinstance(record, Mapping) else None
    if recorded is not None:
        return [recorded]
    keys = ("neuronx-cc", "neuronx-distributed-inference") if backend == "nxdi" else None
    return detect_releases(toolchain, keys)


def vllm_dlc_refusal(backend: str, toolchain: Mapping[str, str | None], extra: Mapping[str, Any]) -> None:
    """InvalidInputError (exit 2) for an NxD Inference or vllm-neuron bundle of SDK 2.27+: the AWS vLLM
    containers that serve them carry no SageMaker serving integration (SOURCES ``DLC-NO-SAGEMAKER``:
    their entrypoint runs its arguments, with no ``serve`` program for SageMaker to start), so the way
    is a user-built image; vLLM itself answers SageMaker's ``/ping`` and ``/invocations`` (vLLM 0.21
    ``vllm/entrypoints/sagemaker/api_router.py``). Bundles of older releases get the generic refusal."""
    kind = VLLM_DLC_BACKENDS.get(backend)
    if kind is None:
        return
    found = _bundle_releases(backend, toolchain, extra)
    if found and all(r.key < Version(FIRST_VLLM_DLC_RELEASE) for r in found):
        return
    release = found[-1] if found else None
    shipping = [r for r in releases() if r.images_serving(kind)]
    own = release.images_serving(kind) if release is not None else ()
    base = (own or shipping[-1].images_serving(kind))[0].reference
    span = f"{shipping[0].version}–{shipping[-1].version}" if shipping else "?"
    which = f"Neuron SDK {release.version}" if release is not None else "an unknown Neuron SDK release"
    msg = (
        f"--for sagemaker: this {backend} bundle ({which}) is served by the AWS vLLM containers "
        f"(pytorch-inference-vllm-neuronx, SDK {span}), which carry no SageMaker serving integration: their "
        "entrypoint runs its arguments as a command and has no `serve` program for SageMaker to start"
    )
    hint = (
        "serve it on EC2 with `neuronc deploy BUNDLE --for vllm`; for a SageMaker endpoint build your own image "
        f"FROM {base} with an executable `serve` on PATH that runs the serve.sh `--for vllm` writes on port 8080 "
        "(vLLM answers SageMaker's /ping and /invocations), push it to ECR and create the endpoint with it"
    )
    raise InvalidInputError(msg, hint=hint)


def aws_domain(region: str) -> str:
    """The partition's DNS suffix: China regions live under ``amazonaws.com.cn`` (botocore endpoints)."""
    return "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"


# trn1n.32xlarge carries the devices of trn1.32xlarge (16 Trainium chips, 32 NeuronCores; more network
# bandwidth): SageMaker accepts it, hardware.INSTANCE_TYPES does not list it yet.
SAME_DEVICES = {"trn1n.32xlarge": "trn1.32xlarge"}


def _accepted() -> str:
    return f"{', '.join(PRODUCTION_VARIANT_INSTANCE_TYPES)} (botocore {BOTOCORE_VERSION} ProductionVariantInstanceType)"


def sagemaker_instance(v: ServingValues, options: DeployOptions) -> tuple[str, InstanceType]:
    """The ``ml.`` instance type of the endpoint and its devices: one SageMaker's
    ``ProductionVariantInstanceType`` enum holds (botocore's client does not check enums; the service
    would refuse the request), ``--instance-type`` or the smallest of the bundle's target with tp cores."""
    from neuronc.hardware import INSTANCE_TYPES, instance_type

    if options.instance_type:
        bare = options.instance_type.removeprefix("ml.")
        if f"ml.{bare}" not in PRODUCTION_VARIANT_INSTANCE_TYPES:
            msg = f"--instance-type {options.instance_type}: not an instance type SageMaker endpoints accept"
            raise InvalidInputError(msg, hint=f"SageMaker's Neuron instance types: {_accepted()}")
        instance = instance_type(SAME_DEVICES.get(bare, bare))
        if instance is None:
            raise InvalidInputError(f"--instance-type {options.instance_type}: not a known Neuron instance type")
        if instance.target != v.target:
            msg = f"--instance-type {bare} is {instance.target}; the bundle was compiled for {v.target}"
            raise InvalidInputError(msg)
        return f"ml.{bare}", instance
    fits = sorted(
        (
            i
            for i in INSTANCE_TYPES
            if i.target == v.target
            and f"ml.{i.name}" in PRODUCTION_VARIANT_INSTANCE_TYPES
            and i.cores_at(v.options) >= v.tp_degree
        ),
        key=lambda i: (i.host_memory_gib, i.devices),
    )
    if not fits:
        msg = f"no SageMaker endpoint instance type of {v.target} has the {v.tp_degree} NeuronCores the bundle needs"
        raise InvalidInputError(msg, hint=f"SageMaker's Neuron instance types: {_accepted()}")
    return f"ml.{fits[0].name}", fits[0]


def render_sagemaker(v: ServingValues, options: DeployOptions) -> Rendered:
    image = _image(v, options)
    s3_uri = options.s3_uri or PLACEHOLDER_S3.format(name=v.name)
    if not s3_uri.startswith("s3://"):
        raise InvalidInputError(f"--s3-uri {s3_uri}: not an s3:// URI")
    if not s3_uri.endswith("/"):
        s3_uri += "/"  # S3Prefix: every object under the prefix, as a directory
    instance_name, instance = sagemaker_instance(v, options)
    cores = instance.cores_at(v.options)  # trn2 at LNC=1: the physical cores
    if cores < v.tp_degree:
        msg = f"--instance-type {instance_name}: {cores} NeuronCores; the bundle needs {v.tp_degree}"
        raise InvalidInputError(msg, hint="choose a larger --instance-type")
    download_s, startup_s = timeouts(v)
    name = f"neuronc-{v.name}"[:63]
    environment = {**sm_on_env(v, f"{MODEL_DIR}/artifacts"), **v.runtime_env}
    model: dict[str, Any] = {
        "ModelName": name,
        "ExecutionRoleArn": options.role_arn or PLACEHOLDER_ROLE,
        "PrimaryContainer": {
            "Image": image,
            "ModelDataSource": {"S3DataSource": {"S3Uri": s3_uri, "S3DataType": "S3Prefix", "CompressionType": "None"}},
            "Environment": environment,
        },
    }
    endpoint_config = {
        "EndpointConfigName": name,
        "ProductionVariants": [
            {
                "VariantName": "AllTraffic",
                "ModelName": name,
                "InstanceType": instance_name,
                "InitialInstanceCount": 1,
                "ModelDataDownloadTimeoutInSeconds": download_s,
                "ContainerStartupHealthCheckTimeoutInSeconds": startup_s,
            }
        ],
    }
    endpoint = {"EndpointName": name, "EndpointConfigName": name}
    commands = [
        ["aws", "s3", "sync", v.bundle, s3_uri],
        ["aws", "sagemaker", "create-model", "--cli-input-json", "file://create-model.json"],
        ["aws", "sagemaker", "create-endpoint-config", "--cli-input-json", "file://create-endpoint-config.json"],
        ["aws", "sagemaker", "create-endpoint", "--cli-input-json", "file://create-endpoint.json"],
    ]
    script = (
        "#!/bin/sh\n"
        f"# Upload bundle {v.key} uncompressed and create a SageMaker endpoint; generated by neuronc deploy.\n"
        "set -eu\n"
        'cd "$(dirname "$0")"\n' + "".join(shlex.join(c) + "\n" for c in commands)
    )

    def dump(data: dict[str, Any]) -> str:
        return json.dumps(data, indent=2) + "\n"

    # SageMaker endpoints take SigV4-signed requests at .../endpoints/NAME/invocations, which vLLM's
    # /invocations route answers like /v1/completions: benchmark through a signing proxy on localhost.
    endpoint_bench = Endpoint(
        target="http://localhost:8080",
        model=v.served_name,
        concurrency=v.batch_size,
        max_prompt=v.max_model_len,
        max_total=v.max_model_len,
        api_routes={"/v1/completions": f"endpoints/{name}/invocations"},
        stream=False,
        validate=False,
        tokenizer=f"{v.bundle}/artifacts",
    )
    proxy = (
        "Requests to a SageMaker endpoint are signed: start a SigV4 proxy on localhost:8080 first, e.g.",
        f"docker run -p 8080:8080 public.ecr.aws/aws-observability/aws-sigv4-proxy --name sagemaker "
        f"--region {options.region} --host runtime.sagemaker.{options.region}.{aws_domain(options.region)}",
    )
    files = (
        EmittedFile("create-model.json", dump(model), "aws sagemaker create-model input"),
        EmittedFile("create-endpoint-config.json", dump(endpoint_config), "aws sagemaker create-endpoint-config input"),
        EmittedFile("create-endpoint.json", dump(endpoint), "aws sagemaker create-endpoint input"),
        EmittedFile("deploy.sh", script, "upload + create the endpoint", executable=True),
        *benchmark_files(v, endpoint_bench, proxy),
    )
    notes: tuple[str, ...] = ()
    if not options.role_arn or not options.s3_uri:
        notes = ("replace the placeholder role ARN / S3 URI (or pass --role-arn / --s3-uri)",)
    return Rendered(Stack.sagemaker, files, image=image, notes=notes)


__all__ = ["MODEL_DIR", "render_sagemaker", "sagemaker_instance", "timeouts", "vllm_dlc_refusal"]
