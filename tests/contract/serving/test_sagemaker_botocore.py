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


def test_recorded_instance_types_are_botocores_production_variant_enum() -> None:
    """neuronc's recorded copy (it does not import botocore at run time) equals the Neuron members of
    the installed botocore's ``ProductionVariantInstanceType``; regenerate with
    scripts/gen_sagemaker_instance_types.py when a botocore release changes them."""
    import botocore
    import botocore.session

    from neuronc.deploy.sagemaker_instance_types import BOTOCORE_VERSION, PRODUCTION_VARIANT_INSTANCE_TYPES

    model = botocore.session.get_session().get_service_model("sagemaker")
    enum = model.shape_for("ProductionVariantInstanceType").enum
    neuron = tuple(v for v in enum if v.startswith(("ml.inf", "ml.trn")))
    assert neuron == PRODUCTION_VARIANT_INSTANCE_TYPES, (
        f"botocore {botocore.__version__} (recorded: {BOTOCORE_VERSION}) has {neuron}; "
        "run scripts/gen_sagemaker_instance_types.py"
    )


def test_every_emitted_instance_type_is_in_botocores_enum(shipped: dict[str, Path]) -> None:
    """ParamValidator does not check enums (botocore/validate.py): check the emitted InstanceType against
    the service model's enum itself."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    enum = set(model.shape_for("ProductionVariantInstanceType").enum)
    rendered = render(shipped["llama3.1-8b-optimum-neuron-tgi"], "sagemaker")
    config = json.loads(next(f.text for f in rendered.files if f.path == "create-endpoint-config.json"))
    assert config["ProductionVariants"][0]["InstanceType"] in enum
