"""The model flags of `compile` and `profiles new`: a build described on the command line.

The flags become a profile (``neuronc.profile.from_flags``), validated by the profile loader, so a
flags-only compile and the equivalent profile build the same thing. ``--revision`` is the model's
Hub revision (commit sha, tag or branch), the same meaning as ``model.revision`` in a profile.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import click

from neuronc._output import out
from neuronc.cli import _cli as cli

if TYPE_CHECKING:
    from neuronc.profile.from_flags import ProfileFlags

ModelOpt = Annotated[
    str | None,
    cli.Option("--model", metavar="ID|DIR", help="Build without a profile: a Hub model id or a local model directory."),
]
RevisionOpt = Annotated[
    str | None,
    cli.Option(
        "--revision",
        metavar="REV",
        help="The model's Hub revision (commit sha, tag or branch), as model.revision.",
    ),
]
BackendOpt = Annotated[str | None, cli.Option("--backend", help="With --model: the backend (see `neuronc backends`).")]
TargetOpt = Annotated[str | None, cli.Option("--target", help="With --model: cpu, inf2, trn1, trn1n, trn2 or trn3.")]
TpOpt = Annotated[int | None, cli.Option("--tp", min=1, help="With --model: tensor-parallel degree (default 1).")]
BatchOpt = Annotated[int | None, cli.Option("--batch", min=1, help="With --model: batch size (default 1).")]
AmpOpt = Annotated[
    str | None, cli.Option("--amp", help="With --model: fp32, fp16 or bf16 (default bf16; fp32 on cpu).")
]
MaxLengthOpt = Annotated[
    int | None, cli.Option("--max-length", min=1, help="With --model: tokens per sequence (prompt + generated).")
]
MaxContextOpt = Annotated[
    int | None, cli.Option("--max-context-length", min=1, help="With --model: longest prompt (default --max-length).")
]
ContextBucketsOpt = Annotated[
    str | None, cli.Option("--context-buckets", metavar="N,N|auto", help="With --model: prompt-length buckets.")
]
TokenBucketsOpt = Annotated[
    str | None, cli.Option("--token-buckets", metavar="N,N|auto", help="With --model: KV-length buckets.")
]
SdkOpt = Annotated[str | None, cli.Option("--sdk", help="With --model: Neuron SDK release (2.31 or 2.31.1).")]
WeightsOpt = Annotated[
    str | None, cli.Option("--weights", help="With --model: presharded, on-load or reference (default: the backend's).")
]
SaveProfileOpt = Annotated[
    Path | None,
    cli.Option("--save-profile", metavar="FILE", help="With --model: write the profile the flags mean to FILE."),
]
DryRunOpt = Annotated[
    bool, cli.Option("--dry-run", help="With --model: validate (and --save-profile) without compiling.")
]


def profiles_to_build(
    profiles: list[Path] | None, flags: ProfileFlags, save_to: Path | None, dry_run: bool
) -> list[Path] | None:
    """The profile files `compile` builds: its arguments, or the one the model flags mean.

    With model flags the profile is validated first (errors name the flags) and written to
    ``save_to``, or to a temporary file removed when the command ends (the bundle keeps it as its
    profile.yaml). None with ``--dry-run``: the profile and its builds were printed, nothing to build.
    """
    from neuronc.errors import InvalidInputError
    from neuronc.profile import show_profile_as
    from neuronc.profile.from_flags import load_flags_profile, refuse_mixing, write_profile

    refuse_mixing(profiles or [], flags)
    if not flags.any_given:
        if save_to is not None or dry_run:
            used = "--save-profile" if save_to is not None else "--dry-run"
            raise InvalidInputError(f"{used} needs --model and its flags", hint="neuronc compile --help")
        if not profiles:
            # A usage error as Click reports a missing argument (exit 2, "Error: ...", the --help hint).
            raise click.UsageError(
                "Missing argument 'PROFILES'. Pass profile files, or --model with --backend, --target and --max-length."
            )
        return profiles
    text: str | None = None  # what --save-profile wrote
    if save_to is not None:
        _, text = load_flags_profile(flags, save_to)
        write_profile(text, save_to, hint="choose another --save-profile FILE")
        out.info(f"profile written to {save_to}")
    if save_to is not None and text is not None and save_to.is_file():
        path = save_to
    else:  # no --save-profile, or one that is not a file to read back (/dev/stdout, a FIFO)
        tmp = Path(tempfile.mkdtemp(prefix="neuronc-flags-"))
        click.get_current_context().call_on_close(lambda: shutil.rmtree(tmp, ignore_errors=True))
        path = tmp / "profile.yaml"
        _, built = load_flags_profile(flags, path, relative_model=False)
        path.write_text(built, encoding="utf-8")
        # Reports and failures name the flags, not this file (removed when the command ends).
        show_profile_as(path, f"--model {flags.model}")
        click.get_current_context().call_on_close(lambda: show_profile_as(path, None))
        text = text or built
    if dry_run:
        _describe(path, text, saved_to=save_to)
        return None
    return [path]


def _describe(path: Path, text: str, *, saved_to: Path | None) -> None:
    """--dry-run: the profile and each build's config hash, as `validate` reports them."""
    from neuronc.cli.profiles import describe_profile

    described = describe_profile(path)
    data = {"dry_run": True, "profile": text, "saved_to": str(saved_to) if saved_to is not None else None, **described}

    def render() -> None:
        out.code(text.rstrip("\n"))
        for build in described["builds"]:
            out.code(f"# build {build['index']}: config hash {build['config_hash']}")

    out.result(data, render)
