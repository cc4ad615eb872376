"""The records every deploy module shares: stacks, options, emitted files, a render result.

A leaf module (it imports nothing from ``neuronc.deploy``), so that the stack modules and the
package ``__init__`` import it without an import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from neuronc.spec import ServingStack as Stack  # one type for the stacks backends name and deploy writes for


@dataclass(frozen=True)
class DeployOptions:
    """What the manifest cannot know: where things run and are reached."""

    bundle_path: str | None = None  # the bundle's path on the serving host (default: as given, absolute)
    instance_type: str | None = None  # default: the smallest instance with tp_degree NeuronCores
    replicas: int | None = None  # compose targets: default = every disjoint device group the instance has
    port: int = 8080
    image: str | None = None  # replaces the image the version table picks (the user vouches for its versions)
    s3_uri: str | None = None  # SageMaker: where the bundle directory was uploaded (an S3 prefix)
    role_arn: str | None = None  # SageMaker execution role
    region: str = "us-east-1"  # SageMaker: the region of the container registry and the endpoint


@dataclass(frozen=True)
class EmittedFile:
    path: str  # relative to the output directory
    text: str
    what: str
    executable: bool = False


@dataclass(frozen=True)
class Rendered:
    """The files a stack needs, the image they name (if any), and notes for the person deploying."""

    stack: Stack
    files: tuple[EmittedFile, ...]
    image: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


__all__ = ["DeployOptions", "EmittedFile", "Rendered", "Stack"]
