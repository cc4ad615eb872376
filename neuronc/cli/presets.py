"""`neuronc profiles list|show|copy|new`: the profiles shipped inside the package (neuronc/data); new ones from flags.

Named `presets` because neuronc/cli/profiles.py holds the commands that take profile files
(validate, schema, hash). Nothing here imports torch or transformers.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli import _model_flags as mf
from neuronc.cli._app import app, command
from neuronc.cli._options import JsonOpt

profiles_app = cli.Group(
    no_args_is_help=True,
    help="The example profiles shipped with neuronc (and the demo model): list, show, copy; new writes one from flags.",
)
app.add_command(profiles_app, name="profiles")

NameArg = Annotated[str, cli.Argument(help="Profile name, as `neuronc profiles list` shows it.", show_default=False)]


@command(profiles_app, name="list", epilog="Example: neuronc profiles list --json | jq -r '.profiles[].name'")
def list_command(json_out: JsonOpt = False) -> None:
    """List the shipped profiles: name, description, backend and target (--json adds the model)."""
    from neuronc.data import shipped_profiles

    out.configure(json_mode=json_out)
    profiles = shipped_profiles()
    data = {"profiles": [p.to_json() for p in profiles]}

    def render() -> None:
        # The description gives way first on a narrow terminal (names never break; see out.table):
        # `neuronc profiles show NAME` prints it, the backend and target tell profiles apart.
        out.table(
            ["name", "backend", "target", "description"],
            [[p.name, p.backend, p.target, p.description] for p in profiles],
            optional=["target", "backend", "description"],
        )

    out.result(data, render)


@command(profiles_app, name="show", epilog="Example: neuronc profiles show tiny-llama-cpu")
def show_command(name: NameArg) -> None:
    """Print a shipped profile's YAML as shipped."""
    from neuronc.data import profile_text

    # Plain text on stdout (not through Rich): the YAML must come out byte for byte.
    sys.stdout.write(profile_text(name))


@command(
    profiles_app,
    name="copy",
    epilog=("Example: neuronc profiles copy tiny-llama-cpu && neuronc compile tiny-llama-cpu.yaml --out demo-bundle"),
)
def copy_command(
    name: NameArg,
    dest: Annotated[
        Path | None,
        cli.Argument(help="A directory (default: the current one) or a .yaml file name to write.", show_default=False),
    ] = None,
    force: Annotated[bool, cli.Option("--force", help="Overwrite files that already exist.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Write a shipped profile where you can edit and compile it (with the model it names, if shipped)."""
    from neuronc.data import copy_profile

    out.configure(json_mode=json_out)
    copied = copy_profile(name, dest, force=force)

    def render() -> None:
        from neuronc.fsutil import plural

        extra = f" and {copied.model_dir} ({plural(len(copied.files) - 1, 'file')})" if copied.model_dir else ""
        out.success(f"wrote {copied.profile}{extra}")
        out.info(f"next: neuronc validate {copied.profile} · neuronc compile {copied.profile}")

    out.result(copied.to_json(), render)


@command(
    profiles_app,
    name="new",
    epilog="Example: neuronc profiles new my-model.yaml --model ./my-model --backend inductor --target cpu "
    "--max-length 128 && neuronc compile my-model.yaml",
)
def new_command(
    path: Annotated[Path, cli.Argument(help="The profile file to write.", show_default=False)],
    model: mf.ModelOpt = None,
    revision: mf.RevisionOpt = None,
    backend: mf.BackendOpt = None,
    target: mf.TargetOpt = None,
    tp: mf.TpOpt = None,
    batch: mf.BatchOpt = None,
    amp: mf.AmpOpt = None,
    max_length: mf.MaxLengthOpt = None,
    max_context_length: mf.MaxContextOpt = None,
    context_buckets: mf.ContextBucketsOpt = None,
    token_buckets: mf.TokenBucketsOpt = None,
    sdk: mf.SdkOpt = None,
    weights: mf.WeightsOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Write the profile model flags describe (what `compile --model ... --save-profile` writes), compiling nothing."""
    from neuronc.profile.from_flags import ProfileFlags, load_flags_profile, write_profile

    out.configure(json_mode=json_out)
    flags = ProfileFlags(
        model, revision, None, backend, target, sdk, tp, batch, amp, max_length, max_context_length,
        context_buckets, token_buckets, weights,
    )  # fmt: skip
    loaded, text = load_flags_profile(flags, path)
    write_profile(text, path, hint="choose another PATH")
    data = {"path": str(path), "profile": text, "builds": len(loaded.builds)}

    def render() -> None:
        out.success(f"wrote {path}")
        out.info(f"next: neuronc validate {path} · neuronc compile {path}")

    out.result(data, render)
