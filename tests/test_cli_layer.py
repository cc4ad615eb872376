"""neuronc.cli._cli: every parameter of every command turns command-line text into what it did on Typer.

The expected values are those neuronc 0.1 gave on Typer 0.29.2 (pydantic's lax parsing, and
neuronc.cli._coerce), recorded before the move to Click, for the same samples. One difference is
known and accepted: an int option now also takes digits of other scripts ("٣" is 3), as Python's
int() does. Error messages are Click's own wording (checked below for being clear), not pydantic's.
"""

from __future__ import annotations

import enum
import inspect
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import click
import jsonschema
import pytest

from neuronc.cli import _cli as cli
from neuronc.cli import app, run_app

ROOT = Path(__file__).resolve().parent.parent
ERR = "error"

# Sample → value on Typer 0.29.2 (recorded), before any min/max applies.
INTS: dict[str, Any] = {
    "0": 0, "1": 1, "7": 7, "-2": -2, " 3": 3, "+4": 4, "1_000": 1000, "3 ": 3,
    "1.5": ERR, "-0.25": ERR, "1e3": ERR, "abc": ERR, "": ERR, "0x10": ERR, "inf": ERR, "nan": ERR, "true": ERR,
}  # fmt: skip
FLOATS: dict[str, Any] = {
    "0": 0.0, "7": 7.0, "-2": -2.0, "1.5": 1.5, "-0.25": -0.25, " 3": 3.0, "+4": 4.0, "1e3": 1000.0,
    "1_000": 1000.0, "inf": math.inf, "abc": ERR, "": ERR, "0x10": ERR, "true": ERR,
}  # fmt: skip
TEXTS = ["0", "-2", " 3", "abc", "", "/tmp", "-", "true", "a b", "ünï"]


def _commands() -> Iterator[tuple[str, click.Command]]:
    def walk(group: click.Group, path: str) -> Iterator[tuple[str, click.Command]]:
        ctx = click.Context(group, info_name=path)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None, name
            if isinstance(command, click.Group):
                yield from walk(command, f"{path} {name}")
            else:
                yield f"{path} {name}", command

    return walk(app, "neuronc")


COMMANDS = list(_commands())
PARAMS = [(path, command, p) for path, command in COMMANDS for p in command.params]


def _declared(command: click.Command) -> dict[str, inspect.Parameter]:
    assert command.callback is not None
    return dict(inspect.signature(command.callback).parameters)  # follows handle_errors' __wrapped__


def _parse(command: click.Command, param: click.Parameter | None, value: str | None) -> Any:
    """Parse a command line that gives ``param`` the text ``value`` (and every other required
    parameter a plain one); the parsed value, or ERR on a usage error."""
    options: list[str] = []
    arguments: list[str] = []
    for other in command.params:
        given = value if other is param else ("x" if other.required else None)
        if given is None:
            continue
        if isinstance(other, click.Argument):
            arguments.append(given)
        else:
            options += [other.opts[0], given]
    try:
        ctx = command.make_context("neuronc", [*options, "--", *arguments])
    except click.UsageError:
        return ERR
    return ctx.params if param is None else ctx.params[param.name or ""]


def test_every_command_is_built_and_every_parameter_has_a_type_the_layer_maps() -> None:
    assert len(COMMANDS) >= 22 and len(PARAMS) > 100
    mapped = (click.types.BoolParamType, click.Path, click.Choice, click.IntRange, click.FloatRange)
    for path, _command, param in PARAMS:
        assert isinstance(param.type, mapped) or param.type in (click.INT, click.FLOAT, click.STRING), (path, param)


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[p for p, _ in COMMANDS])
def test_defaults_reach_the_command_as_declared(path: str, command: click.Command) -> None:
    """Left out, every parameter has the value its function declares (an Enum member, None, False, 32 ...)."""
    parsed = _parse(command, None, None)
    for name, declared in _declared(command).items():
        if declared.default is not inspect.Parameter.empty:
            assert parsed[name] == declared.default and type(parsed[name]) is type(declared.default), (path, name)


def _expected(param: click.Parameter, sample: str) -> Any:
    kind = param.type
    if isinstance(kind, click.Path):
        return Path(sample)
    if isinstance(kind, click.Choice):
        return sample if sample in kind.choices else ERR  # the command gets the Enum member of that value
    if kind == click.STRING:
        return sample
    value = (INTS if isinstance(kind, click.types.IntParamType) else FLOATS)[sample]
    ranged = value is not ERR and isinstance(kind, click.IntRange | click.FloatRange)
    if ranged and ((kind.min is not None and value < kind.min) or (kind.max is not None and value > kind.max)):
        return ERR
    return value


def _samples(param: click.Parameter) -> list[str]:
    if isinstance(param.type, click.types.IntParamType):
        return list(INTS)
    if isinstance(param.type, click.types.FloatParamType):
        return list(FLOATS)
    if isinstance(param.type, click.Choice):
        return [*map(str, param.type.choices), "xx", "", "GITHUB"]
    return TEXTS


def _same(got: Any, want: Any) -> bool:
    """Equal, and of the same type; an Enum member stands for its value."""
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(_same, got, want))
    if isinstance(got, enum.Enum) and isinstance(want, str):
        return got.value == want
    return bool(got == want) and type(got) is type(want)


VALUED = [(path, c, p) for path, c, p in PARAMS if not (isinstance(p, click.Option) and p.is_flag)]


@pytest.mark.parametrize(("path", "command", "param"), VALUED, ids=[f"{p} {param.name}" for p, _, param in VALUED])
def test_values_convert_as_they_did(path: str, command: click.Command, param: click.Parameter) -> None:
    many = param.multiple or param.nargs == -1
    for sample in _samples(param):
        got = _parse(command, param, sample)
        want = _expected(param, sample)
        if want is not ERR and many:
            want = [want]
        assert _same(got, want), (path, param.name, sample, got, want)


def test_flags_are_bools_and_pairs_turn_off(tmp_path: Path) -> None:
    (_, split), *_ = [(p, c) for p, c in COMMANDS if p == "neuronc split"]
    assert split.make_context("split", ["--hash"]).params["hash_shards"] is True
    assert split.make_context("split", ["--hash", "--no-hash"]).params["hash_shards"] is False
    assert split.make_context("split", ["--json"]).params["json_out"] is True


def test_a_repeatable_option_is_a_list_or_none() -> None:
    (compile_command,) = [c for p, c in COMMANDS if p == "neuronc compile"]
    assert compile_command.make_context("compile", ["p.yaml"]).params["only"] is None
    params = compile_command.make_context("compile", ["p.yaml", "--only", "ab12cd", "--only", "ef"]).params
    assert params["only"] == ["ab12cd", "ef"] and params["profiles"] == [Path("p.yaml")]


# -- the layer on its own: what it supports, and what it refuses when the command is built ----------


class Colour(enum.StrEnum):
    red = "red"
    green = "green"


SEEN: list[Any] = []


def _doubled(value: int) -> int:
    """A callback gets the value, as Typer called it (annotations name module-level objects only:
    the layer resolves them with typing.get_type_hints)."""
    SEEN.append(value)
    return value * 2


def _group_with(func: Any) -> tuple[cli.Group, click.Command]:
    group = cli.Group("t")
    group.add_lazy_command("c", func)
    command = group.get_command(click.Context(group), "c")
    assert command is not None
    return group, command


def test_the_layer_maps_every_kind_it_documents() -> None:
    seen = SEEN
    seen.clear()

    def body(
        paths: Annotated[list[Path], cli.Argument(help="p")],
        colour: Colour = Colour.green,
        tags: Annotated[list[str] | None, cli.Option("--tag")] = None,
        ratio: Annotated[float, cli.Option(min=0.0, max=1.0)] = 0.5,
        flag: bool = False,
        noted: Annotated[int, cli.Option("--noted", callback=_doubled)] = 1,
    ) -> None:
        seen.append((paths, colour, tags, ratio, flag, noted))

    group, command = _group_with(body)
    ctx = command.make_context("c", ["a", "b", "--colour", "red", "--tag", "x", "--ratio", "1", "--flag"])
    command.invoke(ctx)
    assert seen == [1, ([Path("a"), Path("b")], Colour.red, ["x"], 1.0, True, 2)]
    with pytest.raises(click.BadParameter, match="'nan' is not a number"):
        command.make_context("c", ["a", "--ratio", "nan"])
    with pytest.raises(click.BadParameter, match=r"1\.5 is not in the range"):
        command.make_context("c", ["a", "--ratio", "1.5"])
    with pytest.raises(click.BadParameter, match="'x' is not a valid integer"):
        command.make_context("c", ["a", "--noted", "x"])
    with pytest.raises(click.MissingParameter) as missing:
        command.make_context("c", [])
    assert missing.value.format_message() == "Missing argument 'PATHS'."
    assert group.list_commands(click.Context(group)) == ["c"]


@pytest.mark.parametrize(
    "annotation",
    [dict, "tuple[int, int]", bytes, enum.IntEnum("Level", {"low": 1})],
    ids=["dict", "tuple", "bytes", "int-enum"],
)
def test_a_type_the_layer_does_not_support_fails_when_the_command_is_built(annotation: Any) -> None:
    def body(value: Any = None) -> None:
        pass

    body.__annotations__["value"] = annotation
    with pytest.raises(TypeError, match="unsupported command-line type"):
        _group_with(body)


def test_a_bool_argument_is_refused() -> None:
    def body(flag: bool) -> None:
        pass

    with pytest.raises(TypeError, match="make it an Option"):
        _group_with(body)


# -- errors: clear messages, exit 2, and the --json document ------------------------------------------

BAD = [
    (["compile", "p.yaml", "--jobs", "0"], "Invalid value for '--jobs' / '-j': 0 is not in the range x>=1."),
    (["compile", "p.yaml", "-j", "zz"], "Invalid value for '--jobs' / '-j': 'zz' is not a valid integer."),
    (["run", "b", "-p", "x", "-t", "hot"], "Invalid value for '--temperature' / '-t': 'hot' is not a valid float."),
    (["verify", "b", "--tol", "nan"], "Invalid value for '--tol': 'nan' is not a number."),
    (["deploy", "b", "--for", "vllm", "--port", "70000"], "70000 is not in the range 1<=x<=65535."),
    (["matrix", "p", "-f", "yaml"], "Invalid value for '--format' / '-f': 'yaml' is not one of 'github', 'json'."),
    (["compile"], "Missing argument 'PROFILES'."),
    (["run", "b"], "Missing option '--prompt' / '-p'."),
    (["validate", "p.yaml", "--bogus"], "--bogus"),
    (["nosuch"], "No such command 'nosuch'."),
    (["store", "list", "--store"], "Option '--store' requires an argument."),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_usage_error_is_exit_2_with_a_clear_message(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_app(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err and "Error: " in captured.err, captured.err


@pytest.mark.parametrize(("args", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_usage_error_with_json_prints_one_error_document(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with_json = [*args[:-1], "--json", args[-1]] if args[-1].startswith("--") else [*args, "--json"]
    assert run_app(with_json) == 2
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    schema = json.loads((ROOT / "docs" / "schemas" / "error.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(document, schema)
    assert (document["error"], document["exit_code"]) == ("usage_error", 2)
    assert message in document["message"] and "--help" in document["hint"]


def test_help_lists_arguments_then_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_app(["split", "--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Usage: neuronc split [OPTIONS] [MODEL]\n")
    assert text.index("\nArguments:\n  [MODEL]  ") < text.index("\nOptions:\n")
    assert "Positional arguments" not in text  # Click 8.5's own section is not added
    assert "  --tp N " in text and "[x>=1]" in text and "--hash / --no-hash" in text


def test_a_run_builds_only_the_command_it_runs() -> None:
    code = (
        "from neuronc.cli import app, run_app\n"
        "assert run_app(['schema', '--help']) == 0\n"
        "print(sorted(n for n, c in app.commands.items() if not hasattr(c, 'commands')))\n"
    )
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "['schema']"


def test_a_reader_that_goes_away_ends_the_run_quietly() -> None:
    """`neuronc schema | head -c 10`: exit 1 and no BrokenPipeError traceback (as Click's main() did)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "neuronc", "schema"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the schema is written
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 1
    assert b"Traceback" not in stderr and b"BrokenPipeError" not in stderr, stderr.decode()
