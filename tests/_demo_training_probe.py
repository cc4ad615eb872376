"""Probe the demo trainer's arithmetic (run by tests/test_demo_model.py in the trainer's pinned environment).

    python tests/_demo_training_probe.py TRAINER

Prints one JSON document:
- ``optimizer``: for the trainer's own optimizer (``make_optimizer``) and, as a control, AdamW's
  single-tensor path (``foreach=False``, the trainer's optimizer before issue 38), the number of
  parameter, ``exp_avg`` and ``exp_avg_sq`` values that differ, bit for bit, from a reference built
  only from correctly rounded float32 operations (numpy), over three steps of seeded tensors;
- ``vml_ops_called``: the ATen ops that a short training run calls and that torch routes through MKL's
  vector math library (the ``IMPLEMENT_VML_MKL`` list of the installed torch's ATen/cpu/vml.h), found
  with torch's public profiler;
- ``capability``: the ATen CPU capability the probe ran under.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch


def load_trainer(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("train_demo_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_adamw_steps(
    param: np.ndarray, grads: list[np.ndarray], lrs: list[float], group: dict[str, Any]
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """AdamW (decoupled weight decay), every operation a correctly rounded float32 one.

    The square root is computed in float64 and rounded once to float32, which is exact for a float32
    argument. Order of operations: torch/optim/adamw.py's update as ATen's fused CPU kernel evaluates it.
    """
    f32 = np.float32
    beta1, beta2 = group["betas"]
    p, m, v = param.copy(), np.zeros_like(param), np.zeros_like(param)
    states = []
    for step, (g, lr) in enumerate(zip(grads, lrs, strict=True), start=1):
        step_size = lr / (1 - beta1**step)
        bias_correction2_sqrt = math.sqrt(1 - beta2**step)
        p = p * f32(1 - lr * group["weight_decay"])
        m = f32(1 - beta1) * (g - m) + m
        v = v * f32(beta2) + f32(1 - beta2) * g * g
        root = np.sqrt(v.astype(np.float64)).astype(np.float32)
        p = p + f32(-step_size) * m / (root / f32(bias_correction2_sqrt) + f32(group["eps"]))
        states.append((p.copy(), m.copy(), v.copy()))
    return states


def optimizer_mismatches(make: Any) -> dict[str, int]:
    """Values that differ from the reference after each of three steps, summed."""
    generator = torch.Generator().manual_seed(38)
    n = 1 << 16
    start = torch.randn(n, generator=generator) * 0.02
    grads = [torch.randn(n, generator=generator) * 3.0 for _ in range(3)]
    param = start.clone().requires_grad_(True)
    optimizer = make([param])
    group = optimizer.param_groups[0]
    lrs = [group["lr"] * scale for scale in (0.25, 1.0, 0.6)]
    expected = reference_adamw_steps(start.numpy(), [g.numpy() for g in grads], lrs, group)
    counts = {"param": 0, "exp_avg": 0, "exp_avg_sq": 0}
    for g, lr, (p, m, v) in zip(grads, lrs, expected, strict=True):
        group["lr"] = lr
        param.grad = g.clone()
        optimizer.step()
        state = optimizer.state[param]
        got = {"param": param.detach(), "exp_avg": state["exp_avg"], "exp_avg_sq": state["exp_avg_sq"]}
        for name, want in (("param", p), ("exp_avg", m), ("exp_avg_sq", v)):
            counts[name] += int((got[name].numpy().view(np.uint32) != want.view(np.uint32)).sum())
    return counts


def vml_ops() -> set[str]:
    header = Path(torch.__file__).parent / "include" / "ATen" / "cpu" / "vml.h"
    names = re.findall(r"^IMPLEMENT_VML_MKL\((\w+),", header.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert names, f"no IMPLEMENT_VML_MKL line in {header}"
    return set(names)


def vml_ops_called(trainer: Any) -> list[str]:
    generator = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, trainer.VOCAB_SIZE, (4 * trainer.WINDOW,), generator=generator)
    weights = trainer.init_weights(generator)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        trainer.train(weights, tokens, 2, generator)
    called = {event.key.removeprefix("aten::").rstrip("_") for event in prof.key_averages()}
    return sorted(called & vml_ops())


def main() -> None:
    trainer = load_trainer(sys.argv[1])
    controls = {
        "trainer": trainer.make_optimizer,
        "single-tensor": lambda ps: torch.optim.AdamW(
            ps, lr=trainer.LEARNING_RATE, betas=(0.9, 0.95), weight_decay=trainer.WEIGHT_DECAY, foreach=False
        ),
    }
    report = {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "optimizer": {name: optimizer_mismatches(make) for name, make in controls.items()},
        "vml_ops_called": vml_ops_called(trainer),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
