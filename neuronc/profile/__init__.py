"""Compile profiles: YAML with positions, schema, matrix expansion, cross-field checks.

``load_profile(path)`` returns a ``LoadedProfile`` whose ``builds`` are fully resolved
``neuronc.spec.BuildSpec`` objects, one per matrix combination. Every problem in a file is collected
and raised together as one ``ProfileError`` whose details read ``file:line:column: field: message``.
"""

from neuronc.profile._checks import auto_buckets
from neuronc.profile._load import LoadedProfile, expand_profile_paths, load_builds, load_profile, parse_profile
from neuronc.profile._matrix import MATRIX_FIELDS
from neuronc.profile._schema import ProfileModel, profile_json_schema

__all__ = [
    "MATRIX_FIELDS",
    "LoadedProfile",
    "ProfileModel",
    "auto_buckets",
    "expand_profile_paths",
    "load_builds",
    "load_profile",
    "parse_profile",
    "profile_json_schema",
]
