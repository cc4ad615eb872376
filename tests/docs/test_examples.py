"""Every shell example in README.md and docs/ runs, with its exit code and output checked.

Sybil (https://sybil.readthedocs.io) parses the pages and runs their examples in page order; this
module gives it one evaluator for shell blocks and one for JSON blocks:

- ```` ```console ````: each `$ command` line runs in a shell, in a directory of its own per page
  (the demo profile and model, a private store, `.venv` pointing at the environment the suite runs
  in); the lines after it are the expected output (stdout and stderr as a terminal shows them), compared with
  doctest's ELLIPSIS (`...` matches anything) after timings (`48.3s`, `1.22 ms`) are masked on both
  sides. A command ending in `# exit N` must exit N, any other 0. A command with `--json` must
  print one document valid against its schema in docs/schemas/.
- ```` ```bash ```` / ```` ```sh ````: the block runs as one script and must exit 0.
- ```` ```json ```` after `<!-- schema: NAME -->`: the example must be valid against
  docs/schemas/NAME.schema.json; every other JSON block must at least be JSON.
- `<!-- skip: next "why" -->` (Sybil's own directive) marks the next example as not runnable here
  and says why (a Neuron host, the network, S3, a 16 GB checkpoint).

`bash scripts/setup.sh` is the one command never run: the suite runs inside the environment it
made (`.venv` in the page's directory is that environment). docs/cli.md (generated usage lines)
and docs/cache-lookup.md (being finished on another branch) are not read here.
"""

from __future__ import annotations

import doctest
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from _schemas import assert_conforms
from conftest import ROOT, Workspace, make_workspace
from sybil import Document, Example, Region, Sybil
from sybil.evaluators.skip import Skipper
from sybil.parsers.markdown import SkipParser
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, RawFencedCodeBlockLexer

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_READ = {"cli.md": "generated usage lines"}
SHELLS = {"console", "bash", "sh"}
SETUP = "bash scripts/setup.sh"  # the suite runs in the environment this made

# Which schema a `neuronc ... --json` command's output follows (by its command words).
SCHEMA_OF = {
    "compile": "compile-report", "store list": "store-list", "store rm": "store-rm", "store gc": "store-gc",
    "store verify": "store-verify", "store publish": "store-publish", "split": "split", "cache mirror": "cache-mirror",
    "profiles list": "profiles-list", "profiles copy": "profiles-copy",
}  # fmt: skip
TIMING = re.compile(r"\d+(?:\.\d+)?\s?(?:ms/token|ms|s)\b")
EXIT = re.compile(r"\s+#\s*exit\s+(\d+)\s*$")

# -- parsing ---------------------------------------------------------------------------------------

_FENCE = RawFencedCodeBlockLexer(
    info_pattern=re.compile(r"(?P<language>[^\s`]*)[^\n]*$\n", re.MULTILINE),
    mapping={"language": "language", "source": "source"},
)


def _fences(document: Document) -> Iterable[Region]:
    for region in _FENCE(document):
        language = region.lexemes["language"]
        region.parsed = (language, str(region.lexemes["source"]))
        region.evaluator = _evaluate_block
        yield region


def _schema_directives(document: Document) -> Iterable[Region]:
    for region in DirectiveInHTMLCommentLexer(directive="schema", arguments=r"[\w-]+")(document):
        region.parsed = region.lexemes["arguments"].strip()
        region.evaluator = _remember_schema
        yield region


SYBIL = Sybil(parsers=[_fences, _schema_directives, SkipParser()])


def _examples() -> list[tuple[Path, Example]]:
    found = []
    for page in PAGES:
        if page.name in NOT_READ:
            continue
        document = SYBIL.parse(page)
        found.extend((page, example) for example in document.examples())
    return found


# -- evaluation -------------------------------------------------------------------------------------

_WORKSPACES: dict[Path, Workspace] = {}


def _remember_schema(example: Example) -> None:
    example.document.namespace["schema"] = example.parsed


def _evaluate_block(example: Example) -> None:
    language, source = example.parsed
    namespace = example.document.namespace
    schema = namespace.pop("schema", None)
    if language == "json":
        document = json.loads(source)
        if schema:
            assert_conforms(schema, document, f"the JSON example at {_where(example)}")
        return
    if language == "python":
        compile(source, _where(example), "exec")  # API sketches: at least valid Python
        return
    if language not in SHELLS:
        return
    ws: Workspace = namespace["workspace"]
    if language == "console":
        for command, expected_exit, want in _session(source):
            _run(ws, example, command, expected_exit, want)
    else:
        _run(ws, example, source, 0, None)


def _session(source: str) -> list[tuple[str, int, str | None]]:
    """(command, expected exit code, expected output or None) for each `$ ` line of a console block."""
    steps: list[tuple[str, int, list[str]]] = []
    continued = False
    for line in source.splitlines():
        if continued and steps:
            steps[-1] = (steps[-1][0] + "\n" + line, steps[-1][1], steps[-1][2])
        elif line.startswith("$ "):
            steps.append((line[2:], 0, []))
        elif steps:
            steps[-1][2].append(line)
        continued = line.endswith("\\")
    result = []
    for command, _, output in steps:
        match = EXIT.search(command)
        code = int(match.group(1)) if match else 0
        text = "\n".join(output).strip("\n")
        result.append((command, code, text or None))
    return result


def _run(ws: Workspace, example: Example, command: str, expected_exit: int, want: str | None) -> None:
    if command.strip() == SETUP or command.startswith(SETUP + " && "):
        command = command.removeprefix(SETUP).removeprefix(" && ")
        if not command.strip():
            return
    proc = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", command],
        cwd=ws.root,
        env=ws.env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    where = _where(example)
    got = (proc.stdout + proc.stderr).rstrip("\n")
    assert proc.returncode == expected_exit, (
        f"{where}: `{command}` exited {proc.returncode}, the page says {expected_exit}\n{got[-3000:]}"
    )
    words = _neuronc_words(command)
    if words is not None and "--json" in words and "|" not in command and ">" not in command:
        name = next((SCHEMA_OF[k] for k in (" ".join(words[:2]), words[0]) if k in SCHEMA_OF), words[0])
        assert_conforms(name, json.loads(proc.stdout), f"`{command}` at {where}")
    if want is not None and "--json" not in (words or []):
        checker = doctest.OutputChecker()
        flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
        mask = lambda text: TIMING.sub("<time>", text)  # noqa: E731
        assert checker.check_output(mask(want) + "\n", mask(got) + "\n", flags), (
            f"{where}: the output of `{command}` is not what the page shows.\n--- the page:\n{want}\n"
            f"--- the command:\n{got[-3000:]}"
        )


def _neuronc_words(command: str) -> list[str] | None:
    """The words after `neuronc` (or `.venv/bin/neuronc`), options dropped; None if it runs no neuronc."""
    try:
        argv = shlex.split(EXIT.sub("", command), comments=True)
    except ValueError:
        return None
    for i, word in enumerate(argv):
        if Path(word).name == "neuronc":
            return [w for w in argv[i + 1 :] if not w.startswith("-") or w == "--json"][:2] + (
                ["--json"] if "--json" in argv[i + 1 :] else []
            )
    return None


def _where(example: Example) -> str:
    return f"{Path(example.path).relative_to(ROOT)}:{example.line}"


EXAMPLES = _examples()


# -- the tests ----------------------------------------------------------------------------------------


def _workspace_for(page: Path, demo: Any, tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    if page not in _WORKSPACES:
        ws = make_workspace(tmp_path_factory.mktemp(f"page-{page.stem}"), demo, bare=True)
        (ws.root / ".venv").symlink_to(sys.prefix)
        (ws.root / "profiles").symlink_to(ROOT / "profiles")
        (ws.root / "scripts").symlink_to(ROOT / "scripts")
        (ws.root / "bench").symlink_to(ROOT / "bench")  # the traffic file docs/profiles.md chooses buckets for
        (ws.root / "tests").symlink_to(ROOT / "tests")  # fixtures (the HF Neuron cache snapshot) examples read
        ws.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{ws.env.get('PATH', '')}"
        _WORKSPACES[page] = ws
    return _WORKSPACES[page]


# Examples that load the model with torch (`run`, `verify --accuracy`) or retrain it take seconds to
# minutes each: they are `slow` (.ci/run runs them; a plain `pytest` does not).
LOADS_TORCH = re.compile(r"neuronc\s+run\s|--accuracy|neuronc\.demo|train_demo_model")


def _loads_torch(example: Example) -> bool:
    parsed = example.parsed
    return isinstance(parsed, tuple) and parsed[0] in SHELLS and bool(LOADS_TORCH.search(parsed[1]))


def _params() -> list[Any]:
    params = []
    for index, (page, example) in enumerate(EXAMPLES):
        slow = _loads_torch(example)
        if isinstance(example.region.evaluator, Skipper) and index + 1 < len(EXAMPLES):
            # A skip directive is an example of its own: it goes with the block it skips, or `-m slow`
            # would select a skipped slow block without its directive, and run it.
            slow = _loads_torch(EXAMPLES[index + 1][1])
        marks = [pytest.mark.slow] if slow else []
        params.append(pytest.param(page, example, marks=marks, id=f"{page.name}:{example.line}"))
    return params


@pytest.mark.parametrize(("page", "example"), _params())
def test_example(page: Path, example: Example, request: pytest.FixtureRequest) -> None:
    if isinstance(example.parsed, tuple) and example.parsed[0] in SHELLS:
        # Only shell blocks need the compiled demo (its graph cache) and a directory to run in.
        demo = request.getfixturevalue("demo")
        factory = request.getfixturevalue("tmp_path_factory")
        example.document.namespace["workspace"] = _workspace_for(page, demo, factory)
    example.evaluate()


def test_every_block_names_its_language() -> None:
    bare = [f"{p.relative_to(ROOT)}:{e.line}" for p, e in EXAMPLES if isinstance(e.parsed, tuple) and not e.parsed[0]]
    assert not bare, f"fenced blocks without a language (use text for diagrams and layouts): {bare}"


def test_every_page_is_read_or_excluded_with_a_reason() -> None:
    names = {p.name for p in PAGES}
    assert set(NOT_READ) <= names, f"NOT_READ names pages that do not exist: {set(NOT_READ) - names}"
    assert sum(1 for _, e in EXAMPLES if isinstance(e.parsed, tuple) and e.parsed[0] in SHELLS) >= 12
