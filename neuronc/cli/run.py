"""`neuronc run BUNDLE --prompt TEXT`: generate with a compiled bundle, streaming the text."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from neuronc._output import out
from neuronc.cli import _cli as cli
from neuronc.cli._app import command
from neuronc.cli._options import JsonOpt

if TYPE_CHECKING:
    from neuronc.cli._report import JSONObject

BundleArg = Annotated[
    Path, cli.Argument(help="Bundle directory (as printed by `neuronc compile`).", show_default=False)
]
PromptOpt = Annotated[str, cli.Option("--prompt", "-p", help="Prompt text.", show_default=False)]
MaxNewTokensOpt = Annotated[int, cli.Option("--max-new-tokens", "-n", min=1, help="Tokens to generate at most.")]
TemperatureOpt = Annotated[
    float, cli.Option("--temperature", "-t", min=0.0, help="0 is greedy; above 0 samples from softmax(logits / T).")
]
SeedOpt = Annotated[int | None, cli.Option("--seed", help="Sampling seed (same seed, same tokens).")]

# OpenMP threads (torch's and the compiled graphs') that wait at a barrier sleep instead of spinning.
# A graph call is many short parallel regions; on a busy machine a spinning thread holds the core
# its descheduled sibling needs: a demo decode step took 0.8-12 ms spinning and 0.17 ms sleeping
# (median of 10x96 steps, 2-core host at load average 3-7; the best step, 0.16 and 0.17 ms).
# libgomp reads it when torch loads it, so it is set before torch is imported. The same threads
# split the same work: the logits are bit for bit the same. A value the user set wins.
_OPENMP_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}

_EPILOG = 'Example: neuronc run ./demo --prompt "The quick brown fox" --max-new-tokens 40 --json'


@command(name="run", epilog=_EPILOG)
def run_command(
    bundle: BundleArg,
    prompt: PromptOpt,
    max_new_tokens: MaxNewTokensOpt = 32,
    temperature: TemperatureOpt = 0.0,
    seed: SeedOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Generate text with a bundle: smallest context bucket that fits, then one token per step."""
    from neuronc.runtime import runnable_backend

    out.configure(json_mode=json_out)
    # Loading binds the weights and warms every graph up: seconds, so it says so while it works.
    with out.progress() as sink:
        loading = sink.task(f"load {bundle}")
        backend = runnable_backend(bundle)
        # This process only loads and runs graphs: what the backend's runtime asks of such a process
        # before it is imported (Backend.runtime.process_env: inductor's torch need not probe the CPU's ISA by
        # compiling test programs), and OpenMP waits passively (_OPENMP_ENV). Not done by
        # neuronc.runtime.load, which runs inside other people's processes.
        for name, value in {**backend.runtime.process_env, **_OPENMP_ENV}.items():
            os.environ.setdefault(name, value)
        runner = backend.runtime.load(bundle)
        loading.done()
    stream = None if json_out else _write_stdout
    result = runner.generate(prompt, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, stream=stream)
    data: JSONObject = {"bundle": str(bundle), "prompt": prompt, **result.to_json()}
    data["temperature"] = temperature
    data["seed"] = seed
    data["load_seconds"] = round(runner.load_seconds, 3)
    if json_out:
        out.result(data)
        return
    sys.stdout.write("\n")
    sys.stdout.flush()
    # The line says what the document says: Generation.to_json's fields, rounded as it rounds them.
    ms_per_token = result.ms_per_token
    per_token = f"{round(ms_per_token, 3):.2f} ms/token" if ms_per_token is not None else "no decode steps"
    out.info(
        f"{len(result.prompt_ids)} prompt tokens (context bucket {result.context_bucket}) · "
        f"{len(result.tokens)} generated ({result.stop_reason}) · "
        f"time to first token {round(result.ttft_ms, 3):.2f} ms · {per_token}"
    )


def _write_stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
