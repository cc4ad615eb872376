"""A profile from command-line flags: `neuronc compile --model ... --backend ...` and `profiles new`.

``ProfileFlags`` holds what the flags say; ``profile_text`` writes the profile those flags mean (a
commented YAML file with the schema line, the same fields a hand-written profile has), and
``load_flags_profile`` validates it with the profile loader itself, so a flags-only compile builds
exactly what the equivalent profile builds (the same config hash: nothing here decides a value the
profile would not). A problem found by the loader is reported against the flag that set the field
(``--tp: must be ...``), not against a line of a file the user never wrote.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from neuronc.errors import InvalidInputError, ProfileError, safe_text
from neuronc.profile._load import LoadedProfile, parse_profile
from neuronc.profile._write import write_profile

# Profile field (as the loader names it in a problem) -> the flag that sets it.
FIELD_FLAGS: dict[str, str] = {
    "model.id": "--model",
    "model.revision": "--revision",
    "model.task": "--task",
    "model": "--model",
    "backend": "--backend",
    "target": "--target",
    "sdk": "--sdk",
    "tp_degree": "--tp",
    "batch_size": "--batch",
    "amp": "--amp",
    "sequence.max_length": "--max-length",
    "sequence.max_context_length": "--max-context-length",
    "sequence.context_buckets": "--context-buckets",
    "sequence.token_buckets": "--token-buckets",
    "sequence": "--max-length",
    "weights": "--weights",
    "name": "--name",
}
# The flags that only describe a model (and that a profile argument already sets).
MODEL_FLAGS = tuple(dict.fromkeys(FIELD_FLAGS.values()))
_DECIMAL = re.compile(r"[0-9]+", flags=re.ASCII)
# No bucket is longer than a 64-bit integer prints (the profile loader refuses larger ones too).
_MAX_BUCKET_DIGITS = 19
_PROBLEM = re.compile(r"^(?P<file>.*?):(?P<line>\d+):(?P<col>\d+): (?P<field>[^:]+): (?P<message>.*)$")


@dataclass(frozen=True)
class ProfileFlags:
    """What the model flags of `compile` (or `profiles new`) say; None is "not given"."""

    model: str | None = None
    revision: str | None = None
    task: str | None = None
    backend: str | None = None
    target: str | None = None
    sdk: str | None = None
    tp: int | None = None
    batch: int | None = None
    amp: str | None = None
    max_length: int | None = None
    max_context_length: int | None = None
    context_buckets: str | None = None
    token_buckets: str | None = None
    weights: str | None = None
    name: str | None = None

    def given(self) -> list[str]:
        """The flags that were given, as typed (``--tp``)."""
        return [_flag(f.name) for f in fields(self) if getattr(self, f.name) is not None]

    @property
    def any_given(self) -> bool:
        return bool(self.given())


def _flag(attribute: str) -> str:
    return "--" + attribute.replace("_", "-")


def parse_buckets(value: str, flag: str) -> list[int] | str:
    """``512,1024`` -> [512, 1024]; ``auto`` stays ``auto``; anything else names the flag."""
    text = value.strip()
    if text == "auto":
        return "auto"
    items = [part.strip() for part in text.split(",")]
    hint = f"e.g. {flag} 512,1024 (or {flag} auto)"
    # ASCII digits only: str.isdigit() also holds for '²' and '٣', which int() then refuses or reads.
    if not items or not all(_DECIMAL.fullmatch(item) for item in items):
        shown = safe_text(repr(value), 60) + (f" ({len(value)} characters)" if len(value) > 60 else "")
        raise InvalidInputError(
            f"{flag} {shown}: not a comma-separated list of positive integers, nor 'auto'", hint=hint
        )
    too_large = next((item for item in items if len(item.lstrip("0")) > _MAX_BUCKET_DIGITS), None)
    if too_large is not None:
        shown = f"{too_large[:24]}… ({len(too_large)} digits)" if len(too_large) > 24 else too_large
        raise InvalidInputError(f"{flag} {shown}: an integer too large", hint=hint)
    buckets = [int(item) for item in items]
    if not all(bucket > 0 for bucket in buckets):
        raise InvalidInputError(f"{flag} {value!r}: buckets are positive integers", hint=hint)
    return buckets


def _required(flags: ProfileFlags) -> None:
    missing = [flag for flag, value in (("--model", flags.model), ("--backend", flags.backend)) if value is None]
    missing += [
        flag for flag, value in (("--target", flags.target), ("--max-length", flags.max_length)) if value is None
    ]
    if missing:
        raise InvalidInputError(
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} required to build without a profile",
            hint="e.g. neuronc compile --model ./my-model --backend inductor --target cpu --max-length 128",
        )


def _scalar(value: object) -> str:
    """A YAML scalar: a JSON string or number is also valid YAML (and keeps '1e5' or 'yes' a string)."""
    return json.dumps(value)


def _model_id(model: str, profile_dir: Path | None) -> str:
    """A local model directory relative to the profile's directory (as profiles write it); a Hub id as given."""
    path = Path(model).expanduser()
    if not path.is_dir():
        return model
    if profile_dir is None:
        return str(path.resolve())
    relative = os.path.relpath(path.resolve(), profile_dir.resolve())
    return relative if relative.startswith("..") or relative.startswith(".") else f"./{relative}"


def schema_line(profile_dir: Path | None) -> list[str]:
    """The ``yaml-language-server`` line: docs/profile.schema.json of this checkout when there is one."""
    checkout = Path(__file__).resolve().parents[2] / "docs" / "profile.schema.json"
    if checkout.is_file() and profile_dir is not None:
        return [f"# yaml-language-server: $schema={os.path.relpath(checkout, profile_dir.resolve())}"]
    return [
        "# Editor checking: `neuronc schema > profile.schema.json` writes the schema this line names.",
        "# yaml-language-server: $schema=profile.schema.json",
    ]


def profile_text(flags: ProfileFlags, profile_dir: Path | None = None, *, relative_model: bool = True) -> str:
    """The profile the flags mean, as a commented YAML document (``profile_dir``: where it will live).

    A local model directory is written relative to ``profile_dir`` (as shipped profiles write it),
    or absolute with ``relative_model=False`` (a profile that lives in a temporary directory).
    """
    _required(flags)
    assert flags.model is not None and flags.backend is not None and flags.max_length is not None
    lines = [
        "# Written by neuronc from command-line flags (neuronc compile --model ... --save-profile, or",
        "# neuronc profiles new); `neuronc compile THIS_FILE` builds the same bundle (the same config hash).",
        *schema_line(profile_dir),
    ]
    if flags.name is not None:
        lines.append(f"name: {_scalar(flags.name)}")
    lines.append("model:")
    local = Path(flags.model).expanduser().is_dir()
    relative = local and relative_model and profile_dir is not None
    comment = (
        "  # a Hugging Face Hub id"
        if not local
        else "  # a local directory" + (", relative to this file" if relative else "")
    )
    model_id = _model_id(flags.model, profile_dir if relative_model else None)
    lines.append(f"  id: {_scalar(model_id)}{comment}")
    if flags.revision is not None:
        lines.append(f"  revision: {_scalar(flags.revision)}  # Hub commit sha, tag or branch")
    if flags.task is not None:
        lines.append(f"  task: {_scalar(flags.task)}")
    lines.append(f"backend: {_scalar(flags.backend)}  # see `neuronc backends`")
    lines.append(f"target: {_scalar(flags.target)}")
    if flags.sdk is not None:
        lines.append(f"sdk: {_scalar(flags.sdk)}  # Neuron SDK release (not hashed: it selects the toolchain)")
    lines.append(f"tp_degree: {_scalar(flags.tp if flags.tp is not None else 1)}")
    lines.append(f"batch_size: {_scalar(flags.batch if flags.batch is not None else 1)}")
    if flags.amp is not None:
        lines.append(f"amp: {_scalar(flags.amp)}")
    else:
        lines.append("# amp: bf16 by default (fp32 on cpu)")
    lines.append("sequence:")
    lines.append(f"  max_length: {_scalar(flags.max_length)}  # prompt + generated tokens")
    if flags.max_context_length is not None:
        lines.append(f"  max_context_length: {_scalar(flags.max_context_length)}  # longest prompt")
    for flag, key, value in (
        ("--context-buckets", "context_buckets", flags.context_buckets),
        ("--token-buckets", "token_buckets", flags.token_buckets),
    ):
        if value is not None:
            lines.append(f"  {key}: {json.dumps(parse_buckets(value, flag))}")
    if flags.weights is not None:
        lines.append(f"weights: {_scalar(flags.weights)}  # presharded | on-load | reference")
    return "\n".join(lines) + "\n"


def flag_problems(error: ProfileError) -> list[str]:
    """The loader's problems (``file:line:col: field: message``) as ``--flag: message``."""
    result = []
    for detail in error.details or [error.message]:
        match = _PROBLEM.match(detail)
        if match is None:
            result.append(detail)
            continue
        field = match["field"]
        flag = _flag_of(field)
        result.append(f"{flag}: {match['message']}" if flag else f"{field}: {match['message']}")
    return result


def _flag_of(field: str) -> str | None:
    """The flag behind a field path such as ``sequence.context_buckets[1]`` (its longest known prefix)."""
    parts = re.sub(r"\[\d+\]", "", field).split(".")
    for end in range(len(parts), 0, -1):
        flag = FIELD_FLAGS.get(".".join(parts[:end]))
        if flag is not None:
            return flag
    return None


def load_flags_profile(flags: ProfileFlags, path: Path, *, relative_model: bool = True) -> tuple[LoadedProfile, str]:
    """Validate the profile the flags mean as if it were written at ``path``; errors name the flags.

    Returns the loaded profile and its text (what to write at ``path``).
    """
    text = profile_text(flags, path.parent, relative_model=relative_model)
    try:
        return parse_profile(text, str(path), base_dir=path.parent), text
    except ProfileError as exc:
        problems = flag_problems(exc)
        raise ProfileError(
            f"the model flags do not make a valid build ({len(problems)} problem{'s' if len(problems) != 1 else ''})",
            details=problems,
            hint="see docs/compile.md (compile without a profile) and `neuronc compile --help`",
        ) from None


def refuse_mixing(profiles: Sequence[object], flags: ProfileFlags) -> None:
    """Profile arguments and model flags together are one build too many: say which flags to drop."""
    if profiles and flags.any_given:
        raise InvalidInputError(
            f"profile arguments and model flags ({', '.join(flags.given())}) cannot be combined",
            hint="a profile sets the model and its shapes: pass either profiles or --model and its flags "
            "(--save-profile FILE writes the flags as a profile you can edit)",
        )


__all__ = [
    "FIELD_FLAGS",
    "MODEL_FLAGS",
    "ProfileFlags",
    "flag_problems",
    "load_flags_profile",
    "parse_buckets",
    "profile_text",
    "refuse_mixing",
    "write_profile",
]
