"""Data-parallel replicas on disjoint ``/dev/neuron*`` groups behind nginx (docker compose).

The pattern of optimum-neuron's ``benchmark/vllm/data-parallel/*/docker-compose*.yaml`` and the TGI
neuron docs: each replica gets whole Neuron devices of its own, only nginx publishes a port.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from neuronc.deploy._types import DeployOptions, EmittedFile
from neuronc.deploy._values import ServingValues
from neuronc.errors import InvalidInputError
from neuronc.hardware import InstanceType

NGINX_IMAGE = "nginx:1.27-alpine"
CONTAINER_BUNDLE = "/bundle"


@dataclass(frozen=True)
class Placement:
    instance: str
    groups: tuple[tuple[int, ...], ...]  # device indices per replica, disjoint

    @property
    def replicas(self) -> int:
        return len(self.groups)


def resolve_instance(v: ServingValues, options: DeployOptions) -> InstanceType:
    """``--instance-type`` (with or without SageMaker's ``ml.``), checked against the bundle, or the default."""
    from neuronc.hardware import default_instance, instance_type

    if options.instance_type:
        instance = instance_type(options.instance_type.removeprefix("ml."))
        if instance is None:
            raise InvalidInputError(f"--instance-type {options.instance_type}: not a known Neuron instance type")
        if instance.target != v.target:
            msg = f"--instance-type {instance.name} is {instance.target}; the bundle was compiled for {v.target}"
            raise InvalidInputError(msg)
        return instance
    instance = default_instance(v.target, v.tp_degree, v.options)
    if instance is None:
        raise InvalidInputError(f"no Neuron instance type for target {v.target}")
    return instance


def placement(v: ServingValues, options: DeployOptions) -> Placement:
    """The instance type and the device groups of each replica: disjoint groups of whole Neuron devices.

    A target with no listed instance size (trn3: no source names one) gets the devices its tp degree
    needs, one replica unless ``--replicas`` says how many the host holds.
    """
    from neuronc.hardware import CHIPS, default_instance, devices_for

    if not options.instance_type and v.target in CHIPS and default_instance(v.target, v.tp_degree, v.options) is None:
        per_replica = devices_for(v.target, v.tp_degree, v.options)
        count = options.replicas if options.replicas is not None else 1
        if count < 1:
            raise InvalidInputError(f"--replicas {count}: at least 1")
        groups = tuple(tuple(range(r * per_replica, (r + 1) * per_replica)) for r in range(count))
        return Placement(f"a {v.target} host", groups)
    instance = resolve_instance(v, options)
    cores = instance.cores_at(v.options)  # trn2 at LNC=1: the physical cores
    per_replica = math.ceil(v.tp_degree / (cores // instance.devices))
    fit = instance.devices // per_replica
    if fit < 1:
        msg = f"{instance.name} has {cores} NeuronCores; the bundle needs {v.tp_degree} per replica"
        raise InvalidInputError(msg, hint="choose a larger --instance-type")
    replicas = options.replicas if options.replicas is not None else fit
    if replicas < 1 or replicas > fit:
        msg = f"--replicas {replicas}: {instance.name} fits 1 to {fit} replicas of {per_replica} device(s) each"
        raise InvalidInputError(msg)
    groups = tuple(tuple(range(r * per_replica, (r + 1) * per_replica)) for r in range(replicas))
    return Placement(instance.name, groups)


def bundle_volumes(v: ServingValues) -> list[str]:
    """The bundle's model/ and artifacts/ mounted read-only: nothing in the container can rewrite the artifacts.

    Written ``HOST:CONTAINER:ro`` here; ``replica_files`` turns every such volume into compose's long
    syntax, with the host path escaped (a ``$`` or ``:`` in it means nothing to compose).
    """
    return [f"{v.bundle}/model:{CONTAINER_BUNDLE}/model:ro", f"{v.bundle}/artifacts:{CONTAINER_BUNDLE}/artifacts:ro"]


def long_volume(volume: str | Mapping[str, Any]) -> Any:
    """``HOST:CONTAINER[:ro]`` as compose's long volume syntax, the host path taken literally.

    The short syntax splits on ``:``, so a bundle path holding one mounts the wrong directory; and
    compose interpolates ``$`` in every value (``$$`` is a literal ``$``: the compose specification,
    "Interpolation"). The container path and the mode are neuronc's own (no ``:``), so the host path
    is everything before them.
    """
    if not isinstance(volume, str):
        return volume
    parts = volume.rsplit(":", 2)
    if len(parts) == 3 and parts[2] in {"ro", "rw"}:
        host, target, mode = parts
    else:
        host, target = volume.rsplit(":", 1)
        mode = "rw"
    return {"type": "bind", "source": host.replace("$", "$$"), "target": target, "read_only": mode == "ro"}


def nginx_conf(v: ServingValues, *, prefix: str, replicas: int, port: int) -> str:
    # nginx.conf is text: nginx has its own block syntax and no data format a library writes for us.
    # Every interpolated value is a number or a service name of [a-z0-9-] built above.
    servers = "".join(f"        server {prefix}-{i}:{port} max_fails=3 fail_timeout=30s;\n" for i in range(replicas))
    return (
        f"# nginx in front of {replicas} replica(s) of bundle {v.key}; generated by neuronc deploy.\n"
        "worker_processes auto;\n"
        "events {\n"
        "    worker_connections 1024;\n"
        "}\n"
        "http {\n"
        "    upstream replicas {\n"
        "        least_conn;\n"
        f"{servers}"
        "    }\n"
        "    server {\n"
        "        listen 80;\n"
        "        client_max_body_size 16m;\n"
        "        location / {\n"
        "            proxy_pass http://replicas;\n"
        "            proxy_http_version 1.1;\n"
        '            proxy_set_header Connection "";\n'
        "            proxy_set_header Host $host;\n"
        "            proxy_buffering off;\n"
        "            proxy_read_timeout 3600s;\n"
        "        }\n"
        "    }\n"
        "}\n"
    )


__all__ = [
    "CONTAINER_BUNDLE",
    "NGINX_IMAGE",
    "Placement",
    "bundle_volumes",
    "long_volume",
    "nginx_conf",
    "placement",
    "resolve_instance",
]


def replica_files(
    v: ServingValues,
    options: DeployOptions,
    where: Placement,
    *,
    prefix: str,
    service: Mapping[str, Any],
    environment: Sequence[Mapping[str, str]],
    port: int,
    what: str,
) -> list[EmittedFile]:
    """``docker-compose.yml`` (one service per replica: ``service`` with its devices and environment, nginx
    in front) and ``nginx.conf``."""
    services: dict[str, Any] = {}
    for index, devices in enumerate(where.groups):
        body = dict(service)
        if "volumes" in body:
            body["volumes"] = [long_volume(volume) for volume in body["volumes"]]
        if environment[index]:
            body["environment"] = dict(environment[index])
        body["devices"] = [f"/dev/neuron{d}:/dev/neuron{d}" for d in devices]
        body["expose"] = [str(port)]
        body["restart"] = "unless-stopped"
        services[f"{prefix}-{index}"] = body
    services["nginx"] = {
        "image": NGINX_IMAGE,
        "volumes": [long_volume("./nginx.conf:/etc/nginx/nginx.conf:ro")],
        "ports": [f"{options.port}:80"],
        "depends_on": [f"{prefix}-{i}" for i in range(where.replicas)],
        "restart": "unless-stopped",
    }
    header = (
        f"# {where.replicas} replica(s) on {where.instance} ({len(where.groups[0])} Neuron device(s) each) "
        f"behind nginx, for bundle {v.config_hash}; generated by neuronc deploy.\n"
    )
    compose = header + yaml.safe_dump({"name": v.name, "services": services}, sort_keys=False, default_flow_style=False)
    return [
        EmittedFile("docker-compose.yml", compose, f"{where.replicas} {what} on {where.instance} behind nginx"),
        EmittedFile("nginx.conf", nginx_conf(v, prefix=prefix, replicas=where.replicas, port=port), "nginx"),
    ]


def endpoint_files(
    v: ServingValues,
    options: DeployOptions,
    *,
    replicas: int,
    max_prompt: int,
    max_total: int,
    tokenizer: str,
    model: str | None = None,
) -> list[EmittedFile]:
    """The GuideLLM hand-off for a deployment reached at ``--port``: as many requests in flight as
    every replica's compiled batch."""
    from neuronc.deploy.benchmark import Endpoint, benchmark_files

    endpoint = Endpoint(
        target=f"http://localhost:{options.port}",
        model=model or v.served_name,  # the name the server answers to
        concurrency=v.batch_size * replicas,
        max_prompt=max_prompt,
        max_total=max_total,
        tokenizer=tokenizer,
    )
    return benchmark_files(v, endpoint)
