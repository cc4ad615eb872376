"""`neuronc run` loads compiled graphs through torch's C++ package loader (``inductor.aoti``), not
through ``torch._inductor.aoti_load_package``, whose import pulls in torch._dynamo. The C++ class is
private torch API: these tests (marked ``compat``) check, on the demo bundle (the session's `demo`
fixture: no compile of its own), that the direct path is the one taken and that it gives exactly
the public loader's logits, tokens and cache contents. Also on the demo bundle: the passive OpenMP
wait `neuronc run` sets changes no logit.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _demo import Demo

PROMPTS = ["The quick brown fox", "Hello, world! This is a tiny model", " ".join(["rain"] * 20)]


def test_the_direct_loader_gives_the_public_loaders_logits(demo: Demo) -> None:
    import torch

    from neuronc.backends.inductor import aoti
    from neuronc.backends.inductor.runtime import load

    direct = load(demo.bundle)
    public = load(demo.bundle, package_loader=aoti.public_load_package)
    assert all(type(g.model).__name__ == "_Direct" for g in direct.graphs), (
        "this torch's AOTIModelPackageLoader no longer matches: `neuronc run` falls back to the public loader "
        "and imports torch._dynamo again"
    )
    assert all(type(g.model).__name__ == "AOTICompiledModel" for g in public.graphs)
    for prompt in PROMPTS:
        ours = direct.generate(prompt, max_new_tokens=24, stop_at_eos=False, keep_logits=True)
        theirs = public.generate(prompt, max_new_tokens=24, stop_at_eos=False, keep_logits=True)
        assert ours.tokens == theirs.tokens and ours.context_bucket == theirs.context_bucket
        assert len(ours.logits) == 24
        assert all(torch.equal(a, b) for a, b in zip(ours.logits, theirs.logits, strict=True)), prompt
        assert all(torch.equal(a, b) for a, b in zip(direct.kv, public.kv, strict=True)), prompt


@pytest.mark.parametrize("name", ["cte-b1-s32", "tkg-b1-s128"])
def test_the_direct_loader_reports_the_public_loaders_constants(demo: Demo, name: str) -> None:
    from neuronc.backends.inductor import aoti

    package = demo.bundle / "artifacts" / f"{name}.pt2"
    assert sorted(aoti.load_package(package).get_constant_fqns()) == sorted(
        aoti.public_load_package(package).get_constant_fqns()
    )


def test_openmp_wait_policy_changes_no_logit(demo: Demo, tmp_path: Path) -> None:
    """`neuronc run` makes OpenMP threads wait passively (cli/run.py): the same work split, the same bits."""
    import torch

    from neuronc.cli.run import _OPENMP_ENV

    code = (
        "import sys, torch\n"
        "from neuronc.backends.inductor.runtime import load\n"
        "runner = load(sys.argv[1])\n"
        "result = runner.generate(sys.argv[2], max_new_tokens=16, stop_at_eos=False, keep_logits=True)\n"
        "torch.save(torch.stack(result.logits), sys.argv[3])\n"
    )
    logits = {}
    for policy in ("ACTIVE", _OPENMP_ENV["OMP_WAIT_POLICY"]):
        out = tmp_path / f"{policy}.pt"
        env = {**demo.env(), "OMP_WAIT_POLICY": policy}
        proc = subprocess.run(
            [sys.executable, "-c", code, str(demo.bundle), PROMPTS[1], str(out)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        logits[policy] = torch.load(out)
    assert _OPENMP_ENV == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert torch.equal(logits["ACTIVE"], logits["PASSIVE"])
