"""Print pip constraints that pin each runtime dependency to the oldest release pyproject.toml allows.

    python scripts/dependency_floor.py cpu remote > oldest.txt
    pip install -c oldest.txt -e '.[cpu,remote]'
    python scripts/dependency_floor.py --installed [oldest.txt]   # what got installed; == the pins?

CI's "oldest" pass (.ci/run, scripts/release_pass.sh) installs with these constraints, so that the
lower bounds in pyproject.toml are releases CI has run, not guesses. It reads `[project]
dependencies` and the extras named on the command line; each requirement must have a lower bound
(`>=` or `==`), since a range without one claims releases nobody tests. torch is left out: CI
installs the local CPU build (scripts/setup.sh pins it), never a PyPI one.
"""

from __future__ import annotations

import sys
import tomllib
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
NOT_PINNED = {"torch"}


def floors(extras: list[str]) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(f"dependency_floor.py: no such extra in pyproject.toml: {', '.join(unknown)}")
    lines: dict[str, str] = {}
    for text in [*project["dependencies"], *(r for e in extras for r in optional[e])]:
        requirement = Requirement(text)
        name = requirement.name.lower().replace("_", "-")
        if name in NOT_PINNED:
            continue
        lower = [s.version for s in requirement.specifier if s.operator in (">=", "==", "~=")]
        if not lower:
            raise SystemExit(
                f"dependency_floor.py: {text!r} has no lower bound: say which release is the oldest tested"
            )
        lines[name] = f"{name}=={lower[0]}"
    return sorted(lines.values())


def installed(constraints: list[str]) -> None:
    """Print the installed release of each of neuronc's requirements; exit 1 where one differs from
    its pin in ``constraints`` (files written by this script)."""
    found: dict[str, str] = {}
    for text in requires("neuronc") or []:
        name = canonicalize_name(Requirement(text).name)
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass  # an extra not installed here (the Neuron SDK's)
    print("installed: " + ", ".join(f"{n} {v}" for n, v in sorted(found.items())))
    wrong = []
    for path in constraints:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if "==" in line and not line.startswith("#"):
                name, pinned = line.split("==")
                got = found.get(canonicalize_name(name))
                if got is not None and Version(got) != Version(pinned):
                    wrong.append(f"{name} {got}, not {pinned}")
    if wrong:
        raise SystemExit("not the pinned releases: " + "; ".join(wrong))


def main() -> None:
    if sys.argv[1:2] == ["--installed"]:
        installed(sys.argv[2:])
        return
    print(f"# The oldest releases pyproject.toml allows (extras: {' '.join(sys.argv[1:]) or 'none'}).")
    print("\n".join(floors(sys.argv[1:])))


if __name__ == "__main__":
    main()
