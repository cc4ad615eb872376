"""The bundle manifest: schema v1, limits, and the checks every reader applies.

A manifest is untrusted data. Everything here is pure: it parses bytes into a ``Manifest`` or raises
``BundleFormatError`` naming every problem. No file other than the manifest is touched.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from neuronc.errors import BundleFormatError
from neuronc.errors import safe_text as safe_text  # re-exported: moved to errors, bundle modules import it here
from neuronc.fsutil import plural
from neuronc.jsonfile import InvalidJsonError, depth_of, parse_json

# -- versions ---------------------------------------------------------------------------------
# MAJOR.MINOR. A minor bump only adds optional fields (older readers ignore them); a major bump is
# a breaking change that older readers refuse. Older majors are upgraded through _MIGRATIONS.
SCHEMA_MAJOR = 1
SCHEMA_MINOR = 1
SCHEMA_VERSION = f"{SCHEMA_MAJOR}.{SCHEMA_MINOR}"
MANIFEST_NAME = "manifest.json"
# Where a load snippet stored in a manifest (``extra.load_snippet``) says the bundle is; readers
# (`neuronc inspect`) put the bundle's real path in its place.
BUNDLE_PLACEHOLDER = "/path/to/this/bundle"

# -- limits (hostile input) -------------------------------------------------------------------
MAX_MANIFEST_BYTES = 32 * 1024 * 1024
SIGNATURE_FILE = "bundle.sig"  # neuronc.bundle.signature.SIGNATURE_NAME: the one file a manifest does not list
MAX_FILES = 200_000
MAX_GRAPHS = 20_000
MAX_SHARDS = 8_192
MAX_STAGES = 256
MAX_WEIGHT_FILES = 100_000
MAX_FILE_BYTES = 1 << 42  # 4 TiB: larger than any single shard or artifact we can produce
MAX_PATH_CHARS = 1024
MAX_COMPONENT_BYTES = 255
MAX_SHAPE = 1 << 24
MAX_SECONDS = 1e9
MAX_DEPTH = 64  # nesting of the free-form fields (profile, hashed_inputs, extra)

HEX64 = r"^[0-9a-f]{64}$"
# A directory name: letters, digits, '.', '-', '_'; not starting with '.' (neuronc.keys.toolchain_label).
TOOLCHAIN_LABEL = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*-[0-9a-f]{8}$"
ROLE_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
ROLES = ("profile", "model", "weights", "artifact", "deploy", "log", "other")
_ROLE_BY_DIR = {"model": "model", "weights": "weights", "artifacts": "artifact", "deploy": "deploy", "logs": "log"}
BUNDLE_DIRS = ("model", "weights", "artifacts", "deploy", "logs")

Hex64 = Annotated[str, Field(pattern=HEX64, description="SHA-256, 64 lowercase hex digits")]
Count = Annotated[int, Field(ge=0, le=MAX_SHAPE)]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
ShortText = Annotated[str, Field(max_length=4096)]
BundlePath = Annotated[str, Field(min_length=1, max_length=MAX_PATH_CHARS, description="relative POSIX path")]


class NewerSchemaError(BundleFormatError):
    """The manifest was written by a newer neuronc (a newer major schema)."""

    kind = "bundle_schema_newer"


class _Record(BaseModel):
    # Unknown keys are ignored rather than refused: a newer minor schema only adds fields.
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


class FileEntry(_Record):
    """One file of the bundle, as written."""

    path: BundlePath
    size: int = Field(ge=0, le=MAX_FILE_BYTES)
    sha256: Hex64
    role: str = Field(pattern=ROLE_PATTERN, description="profile | model | weights | artifact | deploy | log | other")


class Graph(_Record):
    """One compiled graph: a role at one (batch, bucket) shape, and the artifact that holds it."""

    name: ShortText
    role: ShortText
    batch: Count
    bucket: Count
    artifact: BundlePath | None = Field(default=None, description="file (or directory prefix) holding the graph")
    compile_seconds: Seconds = 0.0
    cache_hit: bool = False


class Shard(_Record):
    """One tensor-parallel weight shard."""

    rank: Count
    file: BundlePath
    bytes: int = Field(ge=0, le=MAX_FILE_BYTES)
    sha256: Hex64


class WeightFile(_Record):
    """One file of the original checkpoint (a name in the source, not a bundle path)."""

    path: Annotated[str, Field(max_length=MAX_PATH_CHARS)]
    size: int | None = Field(default=None, ge=0, le=MAX_FILE_BYTES)
    sha256: Hex64 | None = None


class WeightsSource(_Record):
    """Where the weights came from."""

    id: ShortText | None = Field(default=None, description="hub id or local path")
    revision: ShortText | None = None
    mode: ShortText | None = Field(default=None, description="presharded | on-load | reference")
    files: list[WeightFile] = Field(default_factory=list, max_length=MAX_WEIGHT_FILES)


class Stage(_Record):
    """Wall time and peak resident memory of one pipeline stage."""

    name: ShortText
    wall_seconds: Seconds
    peak_rss_bytes: int | None = Field(default=None, ge=0, le=1 << 50)


class HostInfo(_Record):
    hostname: ShortText = ""
    platform: ShortText = ""
    machine: ShortText = ""
    python: ShortText = ""


class _ProfileModel(_Record):
    id: ShortText | None = None
    revision: ShortText | None = None
    task: ShortText | None = None


class _ProfileSequence(_Record):
    max_length: Count | None = None
    max_context_length: Count | None = None
    context_buckets: list[Count] | None = Field(default=None, max_length=MAX_GRAPHS)
    token_buckets: list[Count] | None = Field(default=None, max_length=MAX_GRAPHS)


class ProfileRecord(_Record):
    """The types of the profile fields readers use (deploy, inspect, hash, the store), as BuildSpec gives them.

    ``Manifest.profile`` stays a free-form mapping (a newer minor schema may add fields); these
    fields, where present, must have the types ``BuildSpec.normalized()`` writes.
    """

    model: _ProfileModel | None = None
    backend: ShortText | None = None
    target: ShortText | None = None
    tp_degree: Count | None = None
    batch_size: Count | None = None
    amp: ShortText | None = None
    sequence: _ProfileSequence | None = None
    weights: ShortText | None = None
    compiler_flags: list[ShortText] | None = Field(default=None, max_length=4096)
    options: dict[str, Any] | None = None


class Manifest(_Record):
    """``manifest.json``: what a bundle is, what built it, and every file it holds."""

    schema_version: str = Field(default=SCHEMA_VERSION, pattern=r"^\d{1,4}\.\d{1,4}$")
    neuronc_version: ShortText
    created_at: ShortText = Field(description="ISO 8601, UTC")
    host: HostInfo = Field(default_factory=HostInfo)
    backend: ShortText
    target: ShortText
    profile: dict[str, Any] = Field(description="the normalized build spec (BuildSpec.normalized())")
    config_hash: Hex64
    hashed_fields: list[ShortText] = Field(default_factory=list, max_length=1024)
    hashed_inputs: dict[str, Any] = Field(default_factory=dict)
    toolchain: dict[str, str | None] = Field(default_factory=dict)
    toolchain_key: Hex64
    # Schema 1.1: the store's readable directory name for the toolchain (a store places the bundle
    # at <model>/<toolchain_label>/<config hash[:16]>); absent in 1.0 manifests.
    toolchain_label: str | None = Field(default=None, pattern=TOOLCHAIN_LABEL, max_length=160)
    graphs: list[Graph] = Field(default_factory=list, max_length=MAX_GRAPHS)
    shards: list[Shard] = Field(default_factory=list, max_length=MAX_SHARDS)
    weights: WeightsSource | None = None
    stages: list[Stage] = Field(default_factory=list, max_length=MAX_STAGES)
    files: list[FileEntry] = Field(default_factory=list, max_length=MAX_FILES)
    extra: dict[str, Any] = Field(default_factory=dict, description="backend-specific (e.g. load_snippet)")
    manifest_sha256: Hex64 | None = Field(
        default=None,
        description="SHA-256 of this file's bytes with this value replaced by 64 zeros (always the last field)",
    )

    @field_validator("created_at")
    @classmethod
    def _iso_time(cls, value: str) -> str:
        datetime.fromisoformat(value)
        return value

    # -- conveniences (never raise on odd but valid data) -----------------------------------
    def _profile_get(self, *keys: str) -> Any:
        node: Any = self.profile
        for key in keys:
            if not isinstance(node, Mapping):
                return None
            node = node.get(key)
        return node

    @property
    def model_id(self) -> str | None:
        value = self._profile_get("model", "id")
        return value if isinstance(value, str) else None

    @property
    def model_revision(self) -> str | None:
        value = self._profile_get("model", "revision")
        return value if isinstance(value, str) else None

    @property
    def tp_degree(self) -> int | None:
        value = self._profile_get("tp_degree")
        return value if isinstance(value, int) else None

    @property
    def batch_size(self) -> int | None:
        value = self._profile_get("batch_size")
        return value if isinstance(value, int) else None

    @property
    def dtype(self) -> str | None:
        amp = self._profile_get("amp")
        return {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}.get(amp) if isinstance(amp, str) else None

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def file(self, path: str) -> FileEntry | None:
        for entry in self.files:
            if entry.path == path:
                return entry
        return None

    def artifact_bytes(self, artifact: str | None) -> int | None:
        """Size of a graph's artifact: one file, or every file under a directory prefix."""
        if not artifact:
            return None
        return self.artifact_sizes().get(artifact.rstrip("/"))

    def artifact_sizes(self) -> dict[str, int]:
        """Size of every graph artifact (file or directory prefix), in one pass over the files."""
        wanted = {g.artifact.rstrip("/") for g in self.graphs if g.artifact}
        sizes: dict[str, int] = {}
        for f in self.files:
            if f.path in wanted:
                sizes[f.path] = sizes.get(f.path, 0) + f.size
            parts = f.path.split("/")
            for i in range(1, len(parts)):
                prefix = "/".join(parts[:i])
                if prefix in wanted:
                    sizes[prefix] = sizes.get(prefix, 0) + f.size
        return sizes

    def to_json_text(self) -> str:
        """The manifest as written: schema_version first, two-space indent, trailing newline.

        The last field, ``manifest_sha256``, seals the bytes: verify recomputes it, so a changed byte
        anywhere in manifest.json is caught like a changed byte in any other file.
        """
        data = self.model_dump(mode="json")
        data.pop("manifest_sha256", None)
        data["manifest_sha256"] = _ZEROS
        raw = (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        digest = hashlib.sha256(raw).hexdigest()
        match = _SEAL.search(raw)
        assert match is not None
        return (raw[: match.start(1)] + digest.encode() + raw[match.end(1) :]).decode("utf-8")


_ZEROS = "0" * 64
_SEAL = re.compile(rb'\n  "manifest_sha256": "([0-9a-f]{64})"\n\}\n\Z')


def manifest_seal_problem(raw: bytes) -> str | None:
    """Why manifest bytes do not match their own ``manifest_sha256`` seal, or None when they do."""
    match = _SEAL.search(raw)
    if match is None:
        return "no manifest_sha256 seal at the end of the manifest"
    zeroed = raw[: match.start(1)] + _ZEROS.encode() + raw[match.end(1) :]
    if hashlib.sha256(zeroed).hexdigest() != match.group(1).decode():
        return "manifest changed after it was written (manifest_sha256 differs)"
    return None


# -- paths ----------------------------------------------------------------------------------------


def path_problem(path: str) -> str | None:
    """Why a manifest path is unsafe (absolute, '..', odd characters), or None when it is fine."""
    if not path:
        return "empty path"
    if len(path) > MAX_PATH_CHARS:
        return f"path longer than {MAX_PATH_CHARS} characters"
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        return "absolute path"
    if "\\" in path:
        return "backslash in path (paths are POSIX)"
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return "control character in path"
    parts = path.split("/")
    if ".." in parts:
        return "'..' in path"
    if any(p in ("", ".") for p in parts):
        return "empty or '.' path component"
    if any(len(p.encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES for p in parts):
        return f"path component longer than {MAX_COMPONENT_BYTES} bytes"
    if path == MANIFEST_NAME:
        return "the manifest cannot list itself"
    if path == SIGNATURE_FILE:
        return "reserved for the bundle's signature (a manifest cannot list what covers it)"
    return None


def role_for(path: str) -> str:
    """The default role of a bundle path, from its top-level directory."""
    if path == "profile.yaml":
        return "profile"
    return _ROLE_BY_DIR.get(path.split("/", 1)[0], "other")


def semantic_problems(manifest: Manifest) -> list[str]:
    """Problems pydantic cannot see: unsafe or duplicate paths, dangling references, keys, profile field types."""
    problems: list[str] = []
    try:
        ProfileRecord.model_validate(manifest.profile)
    except ValidationError as exc:
        problems += [f"profile.{_format_error(e)}" for e in exc.errors(include_input=False, include_url=False)[:20]]
    seen: set[str] = set()
    for file in manifest.files:
        why = path_problem(file.path)
        if why:
            problems.append(f"files: {safe_text(file.path)}: {why}")
        elif file.path in seen:
            problems.append(f"files: {safe_text(file.path)}: duplicate entry")
        seen.add(file.path)
    # A path cannot be both a file and a directory holding other files.
    directories = {p.rsplit("/", 1)[0] for p in seen if "/" in p}
    expanded: set[str] = set()
    for d in directories:
        parts = d.split("/")
        expanded.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    for clash in sorted(seen & expanded)[:20]:
        problems.append(f"files: {safe_text(clash)}: listed as a file and as a directory")
    by_path = {f.path: f for f in manifest.files}
    ranks: set[int] = set()
    for shard in manifest.shards:
        why = path_problem(shard.file)
        entry = by_path.get(shard.file)
        if why:
            problems.append(f"shards: rank {shard.rank}: {safe_text(shard.file)}: {why}")
        elif entry is None:
            problems.append(f"shards: rank {shard.rank}: {safe_text(shard.file)} is not in files")
        elif entry.sha256 != shard.sha256 or entry.size != shard.bytes:
            problems.append(f"shards: rank {shard.rank}: {safe_text(shard.file)} disagrees with its files entry")
        if shard.rank in ranks:
            problems.append(f"shards: rank {shard.rank} listed twice")
        ranks.add(shard.rank)
    sizes = manifest.artifact_sizes()
    for graph in manifest.graphs:
        if graph.artifact is None:
            continue
        why = path_problem(graph.artifact.rstrip("/"))
        if why:
            problems.append(f"graphs: {safe_text(graph.name)}: artifact {safe_text(graph.artifact)}: {why}")
        elif graph.artifact.rstrip("/") not in sizes:
            problems.append(f"graphs: {safe_text(graph.name)}: artifact {safe_text(graph.artifact)} is not in files")
    return problems


# -- parsing --------------------------------------------------------------------------------------


# Upgrades from an older major version to the next one: {old_major: function(dict) -> dict}.
# Schema 1 is the first released format, so nothing needs upgrading yet; the reader runs this
# chain so that when schema 2 lands, version-1 manifests keep reading.
Migration = Callable[[dict[str, Any]], dict[str, Any]]
_MIGRATIONS: dict[int, Migration] = {}


def _version_of(data: Mapping[str, Any], where: str) -> tuple[int, int]:
    raw = data.get("schema_version")
    if isinstance(raw, bool) or raw is None:
        raise BundleFormatError(f"{where}: schema_version is missing", hint="is this a neuronc bundle?")
    if isinstance(raw, int):
        return raw, 0
    if isinstance(raw, str) and re.fullmatch(r"\d{1,4}(\.\d{1,4})?", raw):
        major, _, minor = raw.partition(".")
        return int(major), int(minor or 0)
    raise BundleFormatError(f"{where}: schema_version {safe_text(raw, 40)!r} is not MAJOR.MINOR")


def parse_manifest(raw: bytes, *, where: str = MANIFEST_NAME) -> Manifest:
    """Parse and check manifest bytes; raise BundleFormatError (exit 2) naming every problem."""
    if len(raw) > MAX_MANIFEST_BYTES:
        msg = f"{where}: manifest is larger than {MAX_MANIFEST_BYTES // (1024 * 1024)} MiB"
        raise BundleFormatError(msg)
    try:
        value = parse_json(raw, where=where, max_bytes=MAX_MANIFEST_BYTES, max_depth=MAX_DEPTH + 2, unique_keys=True)
    except InvalidJsonError as exc:
        raise BundleFormatError(exc.message) from None
    if not isinstance(value, dict):
        raise BundleFormatError(f"{where}: expected a JSON object, got {type(value).__name__}")
    data: dict[str, Any] = value
    major, minor = _version_of(data, where)
    if major > SCHEMA_MAJOR:
        msg = f"{where}: manifest schema {major}.{minor} is newer than this neuronc reads ({SCHEMA_VERSION})"
        raise NewerSchemaError(msg, hint="upgrade neuronc (pip install -U neuronc) to read this bundle")
    while major < SCHEMA_MAJOR:
        migrate = _MIGRATIONS.get(major)
        if migrate is None:
            msg = f"{where}: manifest schema {major}.{minor} is too old to read (this neuronc reads {SCHEMA_VERSION})"
            raise BundleFormatError(msg, hint="rebuild the bundle with this neuronc")
        data = migrate(data)
        major, minor = _version_of(data, where)
    data["schema_version"] = f"{major}.{minor}"
    for name in ("profile", "hashed_inputs", "extra"):
        if depth_of(data.get(name), MAX_DEPTH) > MAX_DEPTH:
            raise BundleFormatError(f"{where}: {name} nested deeper than {MAX_DEPTH} levels")
    return _validate(data, where)


def _validate(data: dict[str, Any], where: str) -> Manifest:
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        details = [_format_error(e) for e in exc.errors(include_input=False, include_url=False)[:20]]
        more = exc.error_count() - len(details)
        if more > 0:
            details.append(f"... and {more} more")
        msg = f"{where}: invalid manifest ({plural(exc.error_count(), 'problem')})"
        raise BundleFormatError(msg, details=details) from None
    except RecursionError:
        raise BundleFormatError(f"{where}: manifest nested too deeply") from None
    problems = semantic_problems(manifest)
    if problems:
        details = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
        msg = f"{where}: unsafe or inconsistent manifest ({plural(len(problems), 'problem')})"
        raise BundleFormatError(msg, details=details)
    return manifest


def _format_error(error: Mapping[str, Any]) -> str:
    loc = ".".join(safe_text(p, 40) for p in error.get("loc", ())) or "<root>"
    return f"{loc}: {safe_text(error.get('msg', 'invalid'), 200)}"


def manifest_json_schema() -> dict[str, Any]:
    """The JSON Schema of manifest.json (docs/manifest.schema.json is generated from this)."""
    schema = Manifest.model_json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://github.com/neuronc/neuronc/blob/main/docs/manifest.schema.json"
    schema["title"] = f"neuronc bundle manifest (schema {SCHEMA_VERSION})"
    return schema
