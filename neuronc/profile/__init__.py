"""Compile profiles: YAML with positions, schema, matrix expansion, cross-field checks.

``load_profile(path)`` returns a ``LoadedProfile`` whose ``builds`` are typed ``neuronc.build.Build``
objects (a validated ``neuronc.spec.BuildSpec`` and its Backend), one per matrix combination
(``specs``: their specs). Every problem in a file is collected and raised together as one
``ProfileError`` whose details read ``file:line:column: field: message``.
"""

from neuronc.profile._checks import auto_buckets
from neuronc.profile._load import (
    MAX_PROFILE_BYTES,
    LoadedProfile,
    expand_profile_paths,
    load_builds,
    load_profile,
    parse_profile,
    show_profile_as,
)
from neuronc.profile._matrix import MATRIX_FIELDS
from neuronc.profile._schema import ProfileModel, profile_json_schema
from neuronc.profile._write import write_profile
from neuronc.profile._yaml import MAX_YAML_NODES, TooLarge, YamlTree

__all__ = [
    "MATRIX_FIELDS",
    "MAX_PROFILE_BYTES",
    "MAX_YAML_NODES",
    "LoadedProfile",
    "ProfileModel",
    "TooLarge",
    "YamlTree",
    "auto_buckets",
    "expand_profile_paths",
    "load_builds",
    "load_profile",
    "parse_profile",
    "profile_json_schema",
    "show_profile_as",
    "write_profile",
]
