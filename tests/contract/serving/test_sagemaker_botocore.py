"""The SageMaker request files pass botocore's own parameter validation for the SageMaker service
model (client-side: ``botocore.validate.ParamValidator`` on each operation's input shape; no network)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("botocore")

from neuronc.deploy import DeployOptions, render

OPERATIONS = {
    "create-model.json": "CreateModel",
    "create-endpoint-config.json": "CreateEndpointConfig",
    "create-endpoint.json": "CreateEndpoint",
}


@pytest.mark.parametrize(
    "options",
    [
        DeployOptions(),
        DeployOptions(s3_uri="s3://bucket/m", role_arn="arn:aws:iam::123456789012:role/sm", region="eu-west-1"),
    ],
)
def test_request_files_pass_botocore_validation(shipped: dict[str, Path], options: DeployOptions) -> None:
    import botocore.session
    from botocore.validate import ParamValidator

    model = botocore.session.get_session().get_service_model("sagemaker")
    rendered = render(shipped["llama3.1-8b-optimum-neuron-tgi"], "sagemaker", options)
    files = {f.path: f.text for f in rendered.files}
    for path, operation in OPERATIONS.items():
        params = json.loads(files[path])
        report = ParamValidator().validate(params, model.operation_model(operation).input_shape)
        assert not report.has_errors(), f"{path}: {report.generate_report()}"


def test_botocore_validation_is_real(shipped: dict[str, Path]) -> None:
    """A request SageMaker would refuse fails the same validation (the check can fail)."""
    import botocore.session
    from botocore.validate import ParamValidator

    model = botocore.session.get_session().get_service_model("sagemaker")
    rendered = render(shipped["llama3.1-8b-optimum-neuron-tgi"], "sagemaker")
    config = json.loads(next(f.text for f in rendered.files if f.path == "create-endpoint-config.json"))
    config["ProductionVariants"][0]["InitialInstanceCount"] = "one"
    del config["EndpointConfigName"]
    report = ParamValidator().validate(config, model.operation_model("CreateEndpointConfig").input_shape)
    assert report.has_errors()
