"""The deploy emitters against the upstream facts a re-audit found (issue 21 item 5).

Sources for each fact are in the module under test; every test here failed before its fix.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from test_deploy import FULL, _bundle, _files, _flags

from neuronc.deploy import DeployOptions, render
from neuronc.deploy.vllm import DLC_HEALTHCHECK_URL

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
