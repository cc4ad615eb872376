"""The profile schema as users write it (pydantic), its JSON Schema, and pydantic errors in plain words."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from neuronc.spec import TARGETS, WEIGHT_MODES, ModelSection, PositiveInt, StrictModel

Buckets = list[PositiveInt] | Literal["auto"]


class SequenceSection(StrictModel):
    max_length: PositiveInt = Field(description="Total tokens (prompt + generated) per sequence")
    max_context_length: PositiveInt | None = Field(default=None, description="Longest prompt; default max_length")
    context_buckets: Buckets | None = Field(default=None, description="Prompt-length buckets, or 'auto'")
    token_buckets: Buckets | None = Field(default=None, description="KV-length buckets for generation, or 'auto'")


class CompilerSection(StrictModel):
    flags: list[str] = Field(default_factory=list, description="Extra compiler flags, passed through")


class ProfileModel(StrictModel):
    """The profile schema as written by users (before matrix expansion and defaults)."""

    name: str | None = Field(default=None, description="Display name; not part of the config hash")
    description: str | None = Field(default=None, description="Free text; not part of the config hash")
    model: ModelSection
    backend: str = Field(description="Backend name, see `neuronc backends`")
    target: Literal[TARGETS]  # type: ignore[valid-type]
    sdk: str | None = Field(
        default=None,
        pattern=r"^2\.[0-9]{1,3}(\.[0-9]{1,3})?$",
        description=(
            "Neuron SDK release to build with ('2.31' = its newest patch, or '2.31.1'); default: the installed "
            "toolchain's release, else the newest release that supports the backend on the target. Not hashed: "
            "it selects the toolchain, which the toolchain key covers"
        ),
    )
    tp_degree: PositiveInt = 1
    batch_size: PositiveInt = 1
    amp: Literal["fp32", "fp16", "bf16"] | None = Field(default=None, description="default: bf16 (fp32 on cpu)")
    sequence: SequenceSection
    weights: Literal[WEIGHT_MODES] | None = Field(  # type: ignore[valid-type]
        default=None, description="presharded | on-load | reference; default: the backend's (presharded for most)"
    )
    compiler: CompilerSection = Field(default_factory=CompilerSection)
    options: dict[str, Any] = Field(default_factory=dict, description="Backend-specific options")
    matrix: dict[str, list[Any]] = Field(default_factory=dict, description="Lists that expand into builds")

    @field_validator("matrix")
    @classmethod
    def _matrix_lists_not_empty(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in value.items():
            if not values:
                msg = f"matrix '{key}' is an empty list"
                raise ValueError(msg)
        return value


def profile_json_schema() -> dict[str, Any]:
    """JSON Schema of profiles, for editors (yaml-language-server) and `neuronc schema`."""
    schema = ProfileModel.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "neuronc compile profile"
    return schema


def is_union_branch(part: Any) -> bool:
    """pydantic names each member of a union in an error's location (``list[...]``, ``literal[...]``)."""
    return isinstance(part, str) and part.startswith(("list[", "literal[", "function-", "constrained-"))


def raw_at(raw: Any, loc: Sequence[Any]) -> Any:
    node: Any = raw
    for part in loc:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return node


_TYPE_WORDS = {
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "string_type": "a string",
    "list_type": "a list",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "float_type": "a number",
}


def pydantic_message(error: Mapping[str, Any], model: type[BaseModel] = ProfileModel) -> str:
    """One pydantic error in the words a profile author reads (with "did you mean" for unknown keys)."""
    kind = error["type"]
    loc = error["loc"]
    if kind == "extra_forbidden":
        key = str(loc[-1])
        known = known_fields(model, loc[:-1])
        close = difflib.get_close_matches(key, known, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        allowed = f" Allowed: {', '.join(known)}" if known else ""
        return f"unknown key '{key}'.{hint}{allowed}"
    if kind == "missing":
        return "required field is missing"
    if kind in _TYPE_WORDS:
        return f"must be {_TYPE_WORDS[kind]}, got {error['input']!r}"
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        return f"got {error['input']!r}; allowed: {expected}"
    if kind in {"int_type", "int_parsing", "int_from_float"}:
        return f"must be an integer, got {error['input']!r}"
    if kind in {"greater_than_equal", "less_than_equal", "greater_than", "less_than"}:
        return f"{str(error['msg']).lower()}, got {error['input']!r}"
    msg = str(error["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if "input" in error and not isinstance(error["input"], dict | list):
        msg = f"{msg}, got {error['input']!r}"
    return msg


def known_fields(model: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    """The field names a model accepts at ``loc`` (empty where the location is not a model)."""
    current: type[BaseModel] = model
    for part in loc:
        annotation = current.model_fields.get(str(part))
        if annotation is None:
            return []
        candidate = annotation.annotation
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            current = candidate
        else:
            return []
    return list(current.model_fields)
