"""`neuronc split`: split a checkpoint into tensor-parallel rank shards, or check a split."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli._app import command
from neuronc.cli._options import JsonOpt
from neuronc.errors import InvalidInputError, VerificationError
from neuronc.fsutil import format_bytes, plural

_EPILOG = (
    "Examples: neuronc split ./Llama-3.1-8B --tp 8 --out ./weights --dtype bf16 [--hash] | "
    "neuronc split meta-llama/Llama-3.1-8B --tp 8 --out ./weights (from the Hugging Face cache) | "
    "neuronc split --check ./weights --json. "
    "Exit codes: 0 ok, 2 invalid input or broken checkpoint, 4 --check found a mismatch, "
    "5 no space left for --out (nothing is left behind)."
)


@command(name="split", epilog=_EPILOG)
def split_command(
    model_dir: Annotated[
        str | None,
        cli.Argument(
            metavar="MODEL",
            help="Checkpoint directory, or a Hugging Face repo id (org/name) taken from the Hugging Face cache "
            "or downloaded; with --check: the source directory, if not the recorded one.",
        ),
    ] = None,
    revision: Annotated[
        str | None, cli.Option("--revision", help="Branch, tag or commit of a repo id (default: main).")
    ] = None,
    tp: Annotated[int | None, cli.Option("--tp", help="Tensor-parallel degree.", min=1)] = None,
    out_dir: Annotated[Path | None, cli.Option("--out", "-o", help="Output directory (must not exist).")] = None,
    dtype: Annotated[
        str | None, cli.Option("--dtype", help="Cast floating-point weights while streaming: fp32, fp16 or bf16.")
    ] = None,
    hash_shards: Annotated[
        bool,
        cli.Option(
            "--hash/--no-hash",
            help="Record each shard's SHA-256 in index.json (costs a CPU pass over every output byte; "
            "--check compares every tensor with the source either way).",
        ),
    ] = False,
    check: Annotated[
        Path | None,
        cli.Option("--check", help="Reassemble the split in this directory and compare it with the source."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Split a checkpoint into tensor-parallel rank shards, streaming, with bounded memory."""
    out.configure(json_mode=json_out)
    if check is not None:
        if tp is not None or out_dir is not None or dtype is not None or hash_shards or revision is not None:
            raise InvalidInputError("--check takes only the split directory (and optionally MODEL_DIR)")
        _check(check, Path(model_dir) if model_dir is not None else None)
        return
    if model_dir is None or tp is None or out_dir is None:
        msg = "split needs MODEL (a directory or a repo id), --tp and --out (or --check DIR)"
        raise InvalidInputError(msg, hint="neuronc split MODEL_DIR --tp 8 --out DIR")
    from neuronc.checkpoint import split_checkpoint
    from neuronc.model.source import checkpoint_dir

    source = checkpoint_dir(model_dir, revision)
    with out.progress() as sink:
        result = split_checkpoint(source, out_dir, tp, dtype=dtype, progress=sink, hash=hash_shards)
    data = result.to_json()

    def render() -> None:
        if hash_shards:
            rows = [[s.rank, s.file, format_bytes(s.bytes), (s.sha256 or "")[:16]] for s in result.shards]
            out.table(["rank", "file", "size", "sha256"], rows, justify={"size": "right"})
        else:
            rows = [[s.rank, s.file, format_bytes(s.bytes)] for s in result.shards]
            out.table(["rank", "file", "size"], rows, justify={"size": "right"})
        rss = f", peak RSS {format_bytes(result.peak_rss_bytes)}" if result.peak_rss_bytes else ""
        cast = f" as {result.dtype}" if result.dtype else ""
        out.success(
            f"{result.family}: {plural(result.tensors, 'tensor')} into tp={result.tp}{cast}, "
            f"{format_bytes(result.total_bytes)} in {result.seconds:.1f} s{rss} -> {result.out_dir}"
        )

    out.result(data, render)


def _check(split_dir: Path, model_dir: Path | None) -> None:
    from neuronc.checkpoint import check_split

    with out.progress() as sink:
        report = check_split(split_dir, model_dir, progress=sink)
    if not report.ok:
        msg = f"{split_dir}: {plural(len(report.mismatches), 'problem')} against {report.model_dir}"
        details = [str(m) for m in report.mismatches[:20]]
        raise VerificationError(msg, details=details, hint="re-run neuronc split; the source may have changed")

    def render() -> None:
        out.success(
            f"{plural(report.tensors_checked, 'tensor')} in {plural(report.shards_checked, 'shard')} "
            f"match {report.model_dir} "
            f"bit for bit ({format_bytes(report.bytes_compared)} compared in {report.seconds:.1f} s)"
        )

    out.result(report.to_json(), render)
