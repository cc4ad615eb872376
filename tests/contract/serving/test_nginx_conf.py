"""Every emitted ``nginx.conf`` passes nginx's own configuration test (``nginx -t``, Debian's nginx).

Its upstream servers are the compose file's replica services; Compose's DNS resolves those names on
the serving host. Here they are pointed at 127.0.0.1 (nginx resolves upstream names when it loads a
configuration), after checking that they are exactly the services the compose file defines.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from neuronc.deploy import DeployOptions, render
from neuronc.errors import InvalidInputError

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
UPSTREAM = re.compile(r"^(\s*server )([a-z0-9-]+)(:\d+)", re.MULTILINE)
STACKS = ("vllm", "tgi", "sagemaker", "torchserve")
INSTANCES = (None, "inf2.48xlarge", "trn2.48xlarge")


def _emitted_confs(shipped: dict[str, Path]) -> list[tuple[str, dict[str, str]]]:
    found = []
    for name, bundle in sorted(shipped.items()):
        for stack in STACKS:
            for instance in INSTANCES:
                try:
                    rendered = render(bundle, stack, DeployOptions(instance_type=instance))
                except InvalidInputError:
                    continue  # a pairing deploy refuses: nothing emitted
                files = {f.path: f.text for f in rendered.files}
                if "nginx.conf" in files:
                    found.append((f"{name} --for {stack} ({instance or 'default instance'})", files))
    return found


def _nginx_test(conf: str, prefix: Path) -> subprocess.CompletedProcess[str]:
    path = prefix / "nginx.conf"
    path.write_text(conf, encoding="utf-8")
    return subprocess.run(
        [NGINX, "-t", "-q", "-e", "stderr", "-p", str(prefix), "-c", str(path), "-g", f"pid {prefix}/nginx.pid;"],
        capture_output=True,
        text=True,
    )


def test_every_nginx_conf_passes_nginx_t(
    shipped: dict[str, Path], vllm_neuron_bundles: dict[str, Path], tmp_path: Path
) -> None:
    confs = _emitted_confs({**shipped, **vllm_neuron_bundles})
    assert confs, "no shipped profile emitted an nginx.conf"
    for label, files in confs:
        services = set(yaml.safe_load(files["docker-compose.yml"])["services"])
        upstreams = {m.group(2) for m in UPSTREAM.finditer(files["nginx.conf"])}
        assert upstreams and upstreams <= services and services - upstreams == {"nginx"}, label
        prefix = tmp_path / str(len(list(tmp_path.iterdir())))
        prefix.mkdir()
        result = _nginx_test(UPSTREAM.sub(r"\g<1>127.0.0.1\g<3>", files["nginx.conf"]), prefix)
        assert result.returncode == 0, f"{label}: {result.stderr}"


def test_nginx_t_is_real(tmp_path: Path) -> None:
    """A configuration nginx would refuse fails the same test (the check can fail)."""
    result = _nginx_test(
        "events {}\nhttp { upstream u { server 127.0.0.1:1; } server { listen 80; proxy_pas x; } }\n", tmp_path
    )
    assert result.returncode != 0 and "proxy_pas" in result.stderr


pytestmark = pytest.mark.skipif(not Path(NGINX).is_file(), reason="nginx is installed by run_serving_contract.sh")
