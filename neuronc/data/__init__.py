"""Files shipped inside the package: the example profiles and the demo model one of them names.

``neuronc profiles list|show|copy`` reads them from here, so ``pip install neuronc`` alone (no git
checkout) can run the quickstart. In a checkout, ``profiles/`` at the repository root is a symlink to
``neuronc/data/profiles``: one copy of each file. The files are read through ``importlib.resources``
(not ``__file__``), which is what finds package data wherever and however the package is installed.

Light on purpose (YAML, the standard library, neuronc.fsutil), so that the ``profiles`` commands start fast.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath
from typing import Any

from neuronc.errors import InvalidInputError
from neuronc.fsutil import plural, write_output

PROFILE_SUFFIXES = (".yaml", ".yml")


def profiles_root() -> Traversable:
    """The shipped profiles' directory inside the installed package."""
    return files(__name__) / "profiles"


@dataclass(frozen=True)
class ShippedProfile:
    """One shipped profile: ``name`` (its file name without .yaml) is what the commands take."""

    name: str
    file: str
    profile_name: str
    description: str
    backend: str
    target: str
    model: str
    # The model directory shipped beside the profile that ``model.id`` names (relative to the
    # profile, POSIX separators), or None when the profile names a Hub model.
    local_model: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "file": self.file,
            "profile_name": self.profile_name,
            "backend": self.backend,
            "target": self.target,
            "model": self.model,
            "local_model": self.local_model,
        }


def shipped_profiles() -> list[ShippedProfile]:
    """Every shipped profile, sorted by name."""
    root = profiles_root()
    entries = sorted(
        (e for e in root.iterdir() if e.is_file() and e.name.endswith(PROFILE_SUFFIXES)), key=lambda e: e.name
    )
    return [_describe(root, entry) for entry in entries]


def find_profile(name: str) -> ShippedProfile:
    """The shipped profile called ``name`` (file name, with or without .yaml, or its ``name:`` field)."""
    profiles = shipped_profiles()
    stem = name[: -len(Path(name).suffix)] if name.endswith(PROFILE_SUFFIXES) else name
    for profile in profiles:
        if stem in (profile.name, profile.profile_name):
            return profile
    names = [p.name for p in profiles]
    close = difflib.get_close_matches(stem, names, n=1)
    suggestion = f". Did you mean '{close[0]}'?" if close else ""
    raise InvalidInputError(
        f"no shipped profile named '{name}'{suggestion}",
        hint="`neuronc profiles list` shows them: " + ", ".join(names),
    )


def profile_text(name: str) -> str:
    """The YAML text of a shipped profile, as shipped."""
    return (profiles_root() / find_profile(name).file).read_text(encoding="utf-8")


def shipped_files() -> list[str]:
    """Every file under the profiles directory, as POSIX paths relative to it (sorted)."""
    return sorted(str(path) for path, _ in _walk(profiles_root(), PurePosixPath()))


@dataclass(frozen=True)
class CopiedProfile:
    profile: Path
    model_dir: Path | None
    files: list[Path]

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": str(self.profile),
            "model_dir": str(self.model_dir) if self.model_dir else None,
            "files": [str(f) for f in self.files],
        }


def copy_profile(name: str, dest: Path | None = None, *, force: bool = False) -> CopiedProfile:
    """Write a shipped profile to ``dest`` so that it works where it lands.

    ``dest`` is a directory (the default: the working directory; created if missing) or a file
    ending in .yaml/.yml. A profile that names a model shipped beside it (the demo: ``models/tiny-llama``,
    relative to the profile) gets that model copied to the same place relative to the copy, so the
    YAML stays byte for byte as shipped. Existing files are refused unless ``force``; every file is
    written to a temporary name first and renamed into place, so none is left half-written.
    """
    profile = find_profile(name)
    dest = Path(".") if dest is None else dest
    target = dest if dest.suffix in PROFILE_SUFFIXES and not dest.is_dir() else dest / profile.file
    root = profiles_root()
    plan: list[tuple[Traversable, Path]] = [(root / profile.file, target)]
    model_dir = None
    if profile.local_model is not None:
        model_dir = target.parent / profile.local_model
        source = root.joinpath(*PurePosixPath(profile.local_model).parts)
        plan += [(entry, model_dir / rel) for rel, entry in _walk(source, PurePosixPath())]
    existing = [str(path) for _, path in plan if path.exists()]
    if existing and not force:
        raise InvalidInputError(
            f"not overwriting {plural(len(existing), 'existing file')}: {', '.join(existing)}",
            hint="pass --force to overwrite them, or copy somewhere else (neuronc profiles copy NAME DIR)",
        )
    for source_entry, path in plan:
        write_output(path, source_entry.read_bytes(), what="a copy of the profile", fsync=True)
    return CopiedProfile(profile=target, model_dir=model_dir, files=[path for _, path in plan])


def _describe(root: Traversable, entry: Traversable) -> ShippedProfile:
    import yaml

    try:
        data = yaml.safe_load(entry.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:  # pragma: no cover - the shipped profiles are validated by the tests
        raise InvalidInputError(f"shipped profile {entry.name} is not valid YAML: {exc}") from None
    model = data.get("model") or {}
    model_id = str(model.get("id", "")) if isinstance(model, dict) else str(model)
    local = None
    if model_id and not PurePosixPath(model_id).is_absolute() and ".." not in PurePosixPath(model_id).parts:
        candidate = root.joinpath(*PurePosixPath(model_id).parts)
        if candidate.is_dir():
            local = str(PurePosixPath(model_id))
    return ShippedProfile(
        name=entry.name.rsplit(".", 1)[0],
        file=entry.name,
        profile_name=str(data.get("name", "")),
        description=str(data.get("description", "")),
        backend=str(data.get("backend", "")),
        target=str(data.get("target", "")),
        model=model_id,
        local_model=local,
    )


def _walk(entry: Traversable, rel: PurePosixPath) -> list[tuple[PurePosixPath, Traversable]]:
    """(relative path, entry) of every file under ``entry``, skipping Python bytecode caches."""
    found: list[tuple[PurePosixPath, Traversable]] = []
    for child in sorted(entry.iterdir(), key=lambda c: c.name):
        if child.is_dir():
            if child.name != "__pycache__":
                found += _walk(child, rel / child.name)
        else:
            found.append((rel / child.name, child))
    return found
