"""The inductor backend without compiling: plan, cache keys, demo model, and the eager CTE/TKG wrappers vs HF.

The wrappers are what every compiled graph is exported from; running them eagerly through the real
runtime loop (``eager_runner``) checks wrappers, masks, KV handling, bucketing and ragged batches
against Hugging Face ``generate`` in seconds. tests/test_inductor_compile.py compiles them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from neuronc.backends import get_backend
from neuronc.backends.base import ROLE_CONTEXT, ROLE_TOKEN, GraphSpec
from neuronc.backends.inductor.cache import cached_entry, graph_cache_key, sweep_tmp
from neuronc.backends.inductor.format import isa_runs_here, missing_constants, weight_shapes
from neuronc.errors import InvalidInputError, VerificationError
from neuronc.profile import parse_profile

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "profiles" / "models" / "tiny-llama"
PROFILE = REPO / "profiles" / "tiny-llama-cpu.yaml"


def _spec(text: str | None = None, **replace: str) -> Any:
    text = text if text is not None else PROFILE.read_text(encoding="utf-8")
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    return parse_profile(text, str(PROFILE), base_dir=PROFILE.parent).specs[0]


# ------------------------------------------------------------------------------------------------
# Light: no torch
# ------------------------------------------------------------------------------------------------


def test_modules_import_without_torch() -> None:
    code = (
        "import sys, neuronc.cli, neuronc.backends.inductor, neuronc.runtime, neuronc.accuracy, neuronc.demo\n"
        "heavy = [m for m in ('torch', 'transformers', 'tokenizers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_plan_one_graph_per_context_bucket_and_per_token_bucket() -> None:
    plan = get_backend("inductor").plan(_spec())
    assert [g.name for g in plan.graphs] == ["cte-b1-s32", "cte-b1-s64", "tkg-b1-s128"]
    # A token bucket list that stops short of max_length gets max_length appended.
    plan = get_backend("inductor").plan(_spec(**{"token_buckets: [128]": "token_buckets: [64]"}))
    assert [g.name for g in plan.graphs if g.role == ROLE_TOKEN] == ["tkg-b1-s64", "tkg-b1-s128"]
    assert any("added token bucket 128" in n for n in plan.notes)


def test_plan_rejects_unknown_options_and_compiler_flags() -> None:
    text = PROFILE.read_text(encoding="utf-8") + "options:\n  inductor_confg: {}\ncompiler:\n  flags: ['-O3']\n"
    with pytest.raises(InvalidInputError) as info:
        _spec(text)
    details = "\n".join(info.value.details)
    assert "Did you mean 'inductor_config'" in details
    assert "takes no compiler flags" in details


def test_tp_above_one_is_a_profile_error() -> None:
    from neuronc.errors import ProfileError

    with pytest.raises(ProfileError) as info:
        _spec(**{"tp_degree: 1": "tp_degree: 2"})
    assert "inductor backend runs tp_degree 1 only" in "\n".join(info.value.details)


def test_what_compile_would_refuse_is_refused_at_validate_time(tmp_path: Path) -> None:
    """A model type the graphs cannot be built for, and inductor settings AOTInductor does not have,
    are profile errors at their line and column, not a traceback or exit 3 after the split."""
    import shutil
    import subprocess
    import sys

    shutil.copytree(DEMO, tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "model: {id: m}\nbackend: inductor\ntarget: cpu\nsequence: {max_length: 64}\n"
        "options:\n  inductor_config:\n    max_autotun: true\n    cpp.threads: 'x'\n"
        "    aot_inductor.package_constants_in_so: true\n    max_autotune: false\n"
    )
    code = "import sys; from neuronc.cli import main; sys.argv = ['neuronc', 'validate', sys.argv[1]]; main()"
    probe = f"{code}\nimport sys; assert 'torch' not in sys.modules"
    result = subprocess.run([sys.executable, "-c", probe, str(profile)], capture_output=True, text=True, check=False)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert any(":1:9: model.id: model_type 'gpt2' is not supported by the inductor backend" in line for line in lines)
    assert any(":7:5: options.inductor_config.max_autotun: " in line and "'max_autotune'" in line for line in lines)
    assert any(":8:5: options.inductor_config.cpp.threads: expects int" in line for line in lines)
    assert any(
        ":9:5: options.inductor_config.aot_inductor.package_constants_in_so: set by neuronc" in line for line in lines
    )
    assert not any("max_autotune:" in line and "10:" in line for line in lines)  # a real setting passes
    assert "Traceback" not in result.stderr


def test_inductor_settings_are_read_from_the_installed_torch_without_importing_it() -> None:
    import subprocess
    import sys

    probe = (
        "import sys\nfrom neuronc.backends.inductor.options import inductor_settings\n"
        "s = inductor_settings()\nassert 'torch' not in sys.modules\n"
        "assert s['cpp.threads'] == -1 and 'max_autotune' in s and 'aot_inductor.package_constants_in_so' in s\nprint(len(s))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 100


def test_graph_cache_key_covers_its_own_graph_only() -> None:
    config = json.loads((DEMO / "config.json").read_text())
    toolchain = {"torch": "2.13.0", "transformers": "4.57.6", "cpu_isa": "avx2"}

    def key(graph: GraphSpec, **changes: Any) -> str:
        args: dict[str, Any] = {"max_length": 128, "dtype": "float32", "model_config": config, "toolchain": toolchain}
        args.update(changes)
        return graph_cache_key(graph, **args)

    cte32 = GraphSpec(ROLE_CONTEXT, 1, 32)
    base = key(cte32)
    assert base == key(cte32)
    assert base != key(GraphSpec(ROLE_CONTEXT, 1, 64))
    assert base != key(GraphSpec(ROLE_CONTEXT, 2, 32))
    assert base != key(cte32, dtype="bfloat16")
    assert base != key(cte32, max_length=256)
    assert base != key(cte32, toolchain={**toolchain, "cpu_isa": "avx512"})
    assert base != key(cte32, model_config={**config, "num_hidden_layers": 3})
    assert base != key(cte32, inductor_config={"max_autotune": True})
    # Fields that cannot change a graph do not change its key.
    assert base == key(cte32, model_config={**config, "transformers_version": "9.9", "_name_or_path": "x"})


def test_isa_compatibility() -> None:
    assert isa_runs_here("avx2", "avx512_vnni")
    assert not isa_runs_here("avx512", "avx2")
    assert isa_runs_here("avx2", "avx2")
    assert not isa_runs_here("avx2", "unknown")


def test_missing_constants_from_safetensors_headers() -> None:
    shapes = weight_shapes(DEMO / "model.safetensors")
    meta = {
        "constants": {
            "model.lm_head.weight": {"keys": ["lm_head.weight"], "shape": [1024, 80], "graph_owned": False},
            "model.model.norm.weight": {"keys": ["model.norm.weight"], "shape": [32], "graph_owned": False},
            "model.model.gone": {"keys": ["model.gone"], "shape": [1], "graph_owned": False},
            "model.model.rotary_emb.inv_freq": {
                "keys": ["model.rotary_emb.inv_freq"],
                "shape": [8],
                "graph_owned": True,
            },
        }
    }
    problems = missing_constants(meta, shapes)
    assert problems == [
        "model.model.gone: no weight named model.gone",
        "model.model.norm.weight: weight has shape [80], the graph expects [32]",
    ]


def test_damaged_cache_entry_is_a_miss(tmp_path: Path) -> None:
    import hashlib

    (tmp_path / "g.pt2").write_bytes(b"package")
    (tmp_path / "g.constants.safetensors").write_bytes(b"x")
    meta = {"cache_key": "k", "package_sha256": hashlib.sha256(b"package").hexdigest()}
    (tmp_path / "g.json").write_text(json.dumps(meta))
    assert cached_entry(tmp_path, "g", "k") == meta
    assert cached_entry(tmp_path, "g", "other-key") is None
    (tmp_path / "g.pt2").write_bytes(b"packag")  # truncated
    assert cached_entry(tmp_path, "g", "k") is None


def test_prompts_file(tmp_path: Path) -> None:
    from neuronc.accuracy import read_prompts

    (tmp_path / "p.txt").write_text("one\n\n two \n")
    assert read_prompts(tmp_path / "p.txt") == ["one", " two "]
    (tmp_path / "p.json").write_text('["a", "b"]')
    assert read_prompts(tmp_path / "p.json") == ["a", "b"]
    (tmp_path / "empty.txt").write_text("\n")
    with pytest.raises(InvalidInputError):
        read_prompts(tmp_path / "empty.txt")


# ------------------------------------------------------------------------------------------------
# Eager wrappers vs Hugging Face (torch, no compile)
# ------------------------------------------------------------------------------------------------


def _hf_model(family: str, tmp_path: Path) -> tuple[Any, Path]:
    import torch
    import transformers

    common = {
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
    }
    configs = {
        "llama": lambda: transformers.LlamaConfig(**common),
        # A sliding window shorter than the sequences below: the window mask is exercised.
        "mistral": lambda: transformers.MistralConfig(**common, sliding_window=8),
        # Biased q/k/v projections and tied embeddings.
        "qwen2": lambda: transformers.Qwen2Config(**common, tie_word_embeddings=True),
    }
    config = configs[family]()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    directory = tmp_path / family
    config.save_pretrained(directory)
    return model, directory


def _hf_greedy(model: Any, ids: list[int], new: int) -> tuple[list[int], list[Any]]:
    import torch

    input_ids = torch.tensor([ids])
    out = model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=new,
        min_new_tokens=new,
        do_sample=False,
        pad_token_id=0,
        output_logits=True,
        return_dict_in_generate=True,
    )
    return out.sequences[0, len(ids) :].tolist(), [x[0] for x in out.logits]


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2"])
def test_eager_wrappers_match_hf_generate(family: str, tmp_path: Path) -> None:
    from neuronc.backends.inductor.runtime import eager_runner

    model, directory = _hf_model(family, tmp_path)
    runner = eager_runner(
        directory,
        state_dict=model.state_dict(),
        context_buckets=(16, 32),
        token_buckets=(24, 48, 64),  # windows of one 64-position cache: steps move across all three
        max_length=64,
    )
    for length in (1, 5, 16, 17, 30):
        ids = [(7 * i + length) % 250 + 3 for i in range(length)]
        expected, logits = _hf_greedy(model, ids, 20)
        got = runner.generate(ids, max_new_tokens=20, stop_at_eos=False, keep_logits=True)
        assert got.context_bucket == (16 if length <= 16 else 32)
        assert got.tokens == expected, (family, length)
        assert max(float((a - b).abs().max()) for a, b in zip(got.logits, logits, strict=True)) < 1e-4


def test_position_layer_accepts_every_call_the_installed_transformers_makes() -> None:
    """``_PositionLayer.update`` must accept every call shape ``StaticLayer.update`` accepts.

    transformers changed how attention calls the cache between releases (4.57: ``cache_kwargs``
    positionally; 5.24: ``kwargs=`` by keyword); binding the base class's parameters to ours, with
    values in every position the base allows, catches the next change on whatever release CI resolves.
    """
    import inspect

    from transformers.cache_utils import StaticLayer

    from neuronc.backends.inductor.graphs import _PositionLayer

    ours = inspect.signature(_PositionLayer.update)
    base = inspect.signature(StaticLayer.update)
    positional: list[object] = []
    keywords: dict[str, object] = {}
    for name, parameter in base.parameters.items():
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            positional.extend(["extra-1", "extra-2"])
        elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
            keywords.update(kwargs={"cache_position": None}, cache_kwargs={"sliding_window": None})
        elif parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            keywords[name] = name
        else:
            positional.append(name)
    ours.bind(*positional, **keywords)
    # The shapes the supported model families' attention modules use in the releases we claim.
    ours.bind("self", "k", "v", {"cache_position": None})
    ours.bind("self", "k", "v", kwargs={"cache_position": None})
    ours.bind("self", "k", "v", cache_kwargs={"cache_position": None})


def test_eager_ragged_batch_matches_row_by_row(tmp_path: Path) -> None:
    from neuronc.backends.inductor.runtime import eager_runner

    model, directory = _hf_model("llama", tmp_path)
    runner = eager_runner(
        directory,
        state_dict=model.state_dict(),
        batch_size=3,
        context_buckets=(16,),
        max_length=64,
        token_buckets=(64,),
    )
    prompts = [[5, 6, 7, 8, 9, 10, 11, 12, 13], [40, 41, 42], [100]]
    results = runner.generate_batch(prompts, max_new_tokens=12, stop_at_eos=False)
    for ids, result in zip(prompts, results, strict=True):
        assert result.tokens == _hf_greedy(model, ids, 12)[0]
    # Fewer prompts than rows: the idle rows are padding.
    assert runner.generate([40, 41, 42], max_new_tokens=12, stop_at_eos=False).tokens == results[1].tokens


def test_eager_bf16_tracks_hf(tmp_path: Path) -> None:
    import torch

    from neuronc.backends.inductor.runtime import eager_runner

    model, directory = _hf_model("llama", tmp_path)
    model = model.to(torch.bfloat16)
    runner = eager_runner(
        directory,
        dtype="bfloat16",
        state_dict=model.state_dict(),
        context_buckets=(16,),
        max_length=64,
        token_buckets=(64,),
    )
    ids = [3, 14, 15, 92, 65, 35]
    expected, logits = _hf_greedy(model, ids, 8)
    got = runner.generate(ids, max_new_tokens=8, stop_at_eos=False, keep_logits=True)
    assert runner.kv[0].dtype == torch.bfloat16
    assert float((got.logits[0] - logits[0].float()).abs().max()) < 0.1
    assert got.tokens[:4] == expected[:4]


def test_runtime_rejects_bad_inputs(tmp_path: Path) -> None:
    import torch

    from neuronc.backends.inductor.runtime import eager_runner

    runner = eager_runner(DEMO, context_buckets=(32, 64), max_length=128)
    with pytest.raises(InvalidInputError, match="largest context bucket of this bundle is 64"):
        runner.generate(list(range(3, 70)))
    with pytest.raises(InvalidInputError, match="token ids must be in"):
        runner.generate([1, 1024])
    with pytest.raises(InvalidInputError, match="max_new_tokens"):
        runner.generate([1, 2], max_new_tokens=0)
    graph = runner.context_graph_for(10)
    good = (torch.zeros((1, 32), dtype=torch.int64), torch.arange(32)[None], torch.tensor([3]))
    with pytest.raises(InvalidInputError, match=r"input_ids is \[1, 33\] int64, expected \[1, 32\] int64"):
        runner.call(graph, torch.zeros((1, 33), dtype=torch.int64), *good[1:], *runner.kv)
    with pytest.raises(InvalidInputError, match=r"input_ids is .* int32"):
        runner.call(graph, torch.zeros((1, 32), dtype=torch.int32), *good[1:], *runner.kv)
    with pytest.raises(InvalidInputError, match="inputs given"):
        runner.call(graph, *good)
    # Generation stops at max_length and says so.
    result = runner.generate(list(range(3, 60)), max_new_tokens=500, stop_at_eos=False)
    assert len(result.tokens) == 128 - 57 and result.stop_reason == "max_length"


def test_sampling_is_seeded() -> None:
    from neuronc.backends.inductor.runtime import eager_runner

    runner = eager_runner(DEMO, context_buckets=(32,), max_length=128)
    a = runner.generate("The quick brown fox", max_new_tokens=12, temperature=1.0, seed=7)
    b = runner.generate("The quick brown fox", max_new_tokens=12, temperature=1.0, seed=7)
    greedy = runner.generate("The quick brown fox", max_new_tokens=12)
    assert a.tokens == b.tokens
    assert a.tokens != greedy.tokens
    assert greedy.text == runner.decode(greedy.tokens)


def test_bind_constants_reports_every_missing_or_wrong_constant() -> None:
    import torch

    from neuronc.backends.inductor.runtime import bind_constants

    meta = {
        "constants": {
            "model.a": {"keys": ["a"], "shape": [2], "dtype": "float32", "graph_owned": False},
            "model.b": {"keys": ["b"], "shape": [2], "dtype": "float32", "graph_owned": False},
            "model.c": {"keys": ["c"], "shape": [3], "dtype": "float32", "graph_owned": False},
            "model.rotary.inv_freq": {
                "keys": ["rotary.inv_freq"],
                "shape": [4],
                "dtype": "float32",
                "graph_owned": True,
            },
        }
    }
    weights = {"a": torch.ones(2), "c": torch.ones(2)}
    with pytest.raises(VerificationError) as info:
        bind_constants("g", [*sorted(meta["constants"]), "model.unknown"], meta, weights, {}, {})
    details = "\n".join(info.value.details)
    assert "model.b: not in the bundle's weights" in details
    assert "model.c: shape [2] in weights, the graph expects [3]" in details
    assert "model.rotary.inv_freq: not in the bundle's g.constants.safetensors" in details
    assert "model.unknown: the compiled graph needs it but its metadata does not list it" in details
    # Complete: every graph binds the same tensor objects (one copy), cast once to the graph dtype.
    weights = {"a": torch.ones(2, dtype=torch.float64), "b": torch.ones(2), "c": torch.ones(3)}
    owned = {"model.rotary.inv_freq": torch.arange(4.0)}
    shared: dict[str, Any] = {}
    first = bind_constants("g1", sorted(meta["constants"]), meta, weights, owned, shared)
    second = bind_constants("g2", sorted(meta["constants"]), meta, weights, owned, shared)
    assert all(first[k] is second[k] for k in first)
    assert first["model.a"].dtype == torch.float32


def test_stale_graph_cache_scratch_is_swept(tmp_path: Path) -> None:
    import os

    old, fresh = tmp_path / "old-build", tmp_path / "live-build"
    old.mkdir()
    fresh.mkdir()
    (old / "cte.pt2").write_bytes(b"partial")
    os.utime(old, (0, 0))
    sweep_tmp(tmp_path)
    assert not old.exists() and fresh.exists()


def test_tied_embeddings_are_one_constant_with_both_checkpoint_names(tmp_path: Path) -> None:
    import torch

    from neuronc.backends.inductor import graphs

    _, directory = _hf_model("qwen2", tmp_path)
    model = graphs.build_model(graphs.load_config(directory), torch.float32)
    sources = graphs.constant_sources(graphs.wrapper_for(model, ROLE_TOKEN, 64))
    assert sources["model.lm_head.weight"]["keys"] == ["lm_head.weight", "model.embed_tokens.weight"]
    assert not sources["model.lm_head.weight"]["graph_owned"]
    owned = [name for name, info in sources.items() if info["graph_owned"]]
    # Non-persistent rotary buffers only (transformers 5 adds `original_inv_freq` beside `inv_freq`).
    assert "model.model.rotary_emb.inv_freq" in owned
    assert set(owned) <= {"model.model.rotary_emb.inv_freq", "model.model.rotary_emb.original_inv_freq"}


def test_tokenizer_json_is_read_as_transformers_reads_it(tmp_path: Path) -> None:
    """`run` reads the demo's tokenizer.json with `tokenizers` (no transformers import): the same ids and text."""
    from transformers import AutoTokenizer

    from neuronc.backends.inductor.tokenizer import _tokenizer_config, direct_reason, load_tokenizer

    assert direct_reason(DEMO, _tokenizer_config(DEMO)) is None
    direct = load_tokenizer(DEMO)
    assert type(direct).__name__ == "_Direct"
    reference = AutoTokenizer.from_pretrained(str(DEMO), local_files_only=True)
    prompts = ["The quick brown fox", "Alice said, 'I can't!' and they're off.", "  two  spaces", "é ü ß", ""]
    for prompt in prompts:
        ids = direct.encode(prompt)
        assert ids == reference(prompt)["input_ids"], prompt
        with_specials = [*ids, 2, 1, 0, *ids]
        assert direct.decode(with_specials) == reference.decode(with_specials, skip_special_tokens=True), prompt

    # A tokenizer class or setting that makes transformers rewrite what tokenizer.json says goes through it.
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer.json").write_bytes((DEMO / "tokenizer.json").read_bytes())
    config = json.loads((DEMO / "tokenizer_config.json").read_text(encoding="utf-8"))
    for changed in ({"tokenizer_class": "LlamaTokenizerFast"}, {"add_bos_token": False}):
        (model / "tokenizer_config.json").write_text(json.dumps({**config, **changed}), encoding="utf-8")
        assert direct_reason(model, _tokenizer_config(model)) is not None
    assert direct_reason(tmp_path, {}) == "no tokenizer.json"


def test_the_worker_preloads_modules_this_torch_has() -> None:
    # The preload is only worth something while torch still has these modules (a missing one is
    # skipped silently at run time, which this test would not let pass unnoticed).
    import importlib.util

    from neuronc.backends.inductor.worker import SHARED_IMPORTS

    for name in SHARED_IMPORTS:
        assert importlib.util.find_spec(name) is not None, name


def test_the_costliest_graphs_start_first() -> None:
    from neuronc.backends.inductor.build import Pending, _start_order

    def pending(role: str, bucket: int) -> Pending:
        graph = GraphSpec(role, 1, bucket)
        return Pending(graph, graph.name, Path(graph.name), Path(graph.name) / "log")

    items = [pending(ROLE_CONTEXT, 32), pending(ROLE_TOKEN, 128), pending(ROLE_CONTEXT, 64)]
    assert [p.graph.name for p in _start_order(items)] == ["cte-b1-s64", "cte-b1-s32", "tkg-b1-s128"]
