"""SDK double of ``transformers_neuronx``: ``<Arch>ForSampling`` and ``NeuronConfig``.

``from_pretrained`` reads a checkpoint the way the real one does (model.safetensors, the
safetensors index, the ``pytorch_model.bin/`` split directory with key_to_filename.json, or
pytorch_model.bin, in that order) and checks the keyword arguments; ``to_neuron``/``cpu_compile``
"compile" one kernel per context and token bucket; ``save`` writes ``<sha256(HLO)[:20]>.neff``
files; after ``load(dir)``, ``to_neuron`` fails as the real one does when a NEFF is missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from pathlib import Path
from typing import Any

from sdk_double_common import compile_graph, recorded

SDK_DOUBLE = True
__version__ = "0.13.1315"
TNX = "transformers-neuronx"


class NeuronConfig:
    @recorded(TNX, "transformers_neuronx.NeuronConfig", method=True)
    def __init__(self, **kwargs: Any) -> None:
        for key, value in kwargs.items():
            setattr(self, key, value)

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


def _buckets(value: Any, name: str) -> list[int]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        if value != sorted(value):
            raise ValueError(f"{name} must be sorted")
        return list(value)
    raise TypeError(f"{name} must be an int or a list of ints, got {value!r}")


def _load_checkpoint(path: Path) -> int:
    """Count the tensors of a checkpoint directory, reading the formats in the real loader's order."""
    import torch
    from safetensors import safe_open

    if (path / "model.safetensors").is_file():
        with safe_open(str(path / "model.safetensors"), framework="pt") as f:
            return len(list(f.keys()))
    if (path / "model.safetensors.index.json").is_file():
        index = json.loads((path / "model.safetensors.index.json").read_text())
        return len(index["weight_map"])
    split = path / "pytorch_model.bin"
    if split.is_dir():
        table = json.loads((split / "key_to_filename.json").read_text())
        for name in table.values():
            torch.load(split / name, weights_only=True)
        return len(table)
    if split.is_file():
        return len(torch.load(split, weights_only=True))
    raise FileNotFoundError(f"no checkpoint in {path}")


class _SamplingDouble:
    def __init__(
        self,
        config: dict[str, Any],
        *,
        batch_size: int = 1,
        amp: str = "f32",
        tp_degree: int = 2,
        n_positions: int | list[int] = 2048,
        context_length_estimate: int | list[int] | None = None,
        neuron_config: NeuronConfig | None = None,
        **kwargs: Any,
    ) -> None:
        if amp not in ("f32", "f16", "bf16"):
            raise ValueError(f"amp must be 'f32', 'f16' or 'bf16', got {amp!r}")
        self.config = config
        self.batch_size = batch_size
        self.amp = amp
        self.tp_degree = tp_degree
        self.token_buckets = _buckets(n_positions, "n_positions")
        if context_length_estimate is None:
            context_length_estimate = [b // 2 for b in self.token_buckets]
        self.context_buckets = _buckets(context_length_estimate, "context_length_estimate")
        if self.context_buckets[-1] > self.token_buckets[-1]:
            raise ValueError("context_length_estimate cannot exceed n_positions")
        self.neuron_config = neuron_config
        self.kwargs = kwargs
        self._neffs: dict[str, bytes] = {}
        self._load_dir: str | None = None
        self.n_tensors = 0

    @classmethod
    @recorded(TNX, "transformers_neuronx.{cls}.from_pretrained", method=True)
    def from_pretrained(cls, pretrained_model_path: str, *model_args: Any, **kwargs: Any) -> _SamplingDouble:
        path = Path(pretrained_model_path)
        config = json.loads((path / "config.json").read_text())
        model = cls(config, *model_args, **kwargs)
        model.n_tensors = _load_checkpoint(path)
        return model

    def _kernels(self) -> list[tuple[str, str]]:
        spec = {
            "cls": type(self).__name__,
            "batch": self.batch_size,
            "amp": self.amp,
            "tp": self.tp_degree,
            "nc": self.neuron_config.to_json() if self.neuron_config else None,
            "kw": self.kwargs,
        }
        kernels = []
        for role, buckets in (("context", self.context_buckets), ("token", self.token_buckets)):
            for bucket in buckets:
                hlo = json.dumps({**spec, "role": role, "bucket": bucket}, sort_keys=True)
                kernels.append((f"{role}-{bucket}", hashlib.sha256(hlo.encode()).hexdigest()[:20]))
        return kernels

    def _compile(self) -> None:
        flags = shlex.split(os.environ.get("NEURON_CC_FLAGS", ""))
        for flag in ("--model-type=transformer", "--auto-cast=none"):
            if not any(f.startswith(flag.split("=")[0]) for f in flags):
                flags.append(flag)
        for name, digest in self._kernels():
            self._neffs[digest] = compile_graph(Path.cwd() / "tnx" / name, name, flags)

    @recorded(TNX, "transformers_neuronx.{cls}.cpu_compile", method=True)
    def cpu_compile(self) -> None:
        self._compile()

    @recorded(TNX, "transformers_neuronx.{cls}.to_neuron", method=True)
    def to_neuron(self) -> None:
        if self._load_dir is None:
            self._compile()
            return
        for _, digest in self._kernels():
            neff = Path(self._load_dir) / f"{digest}.neff"
            if not neff.is_file():
                raise FileNotFoundError(f"Could not find a matching NEFF for your HLO in this directory: {neff}")
            self._neffs[digest] = neff.read_bytes()

    @recorded(TNX, "transformers_neuronx.{cls}.save", method=True)
    def save(self, directory: str, sharded_weights: bool = False) -> None:
        if not self._neffs:
            raise RuntimeError("nothing compiled yet")
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        for digest, data in self._neffs.items():
            (out / f"{digest}.neff").write_bytes(data)

    @recorded(TNX, "transformers_neuronx.{cls}.load", method=True)
    def load(self, directory: str) -> None:
        self._load_dir = directory

    def _generate(
        self,
        input_ids: Any,
        sequence_length: int,
        start_ids: Any,
        top_k: int,
        eos_stops: bool,
        temperature: float = 1.0,
    ) -> Any:
        """Stand in for the sampling loops (``sampling.py``): ``sample_llama`` when ``eos_stops`` (a row
        that samples EOS is filled with ``eos_token_id[0]``; the loop ends when every row has), else
        ``simple_sample`` (EOS is never sampled; always to ``sequence_length``).

        The "model": each row's first new token is a function of its tokens from ``start_ids`` on
        (what the real attention mask lets it see) and their count (its positions), then +1 per step;
        with ``top_k`` > 1 a seeded random offset is added (sampling is random in the real loops).
        """
        import torch

        if not self._neffs:
            raise RuntimeError("sample() before to_neuron()")
        batch, width = input_ids.shape
        if batch != self.batch_size:
            raise ValueError(f"Model not compiled for batch_size : {batch}")
        if sequence_length > self.token_buckets[-1]:
            raise ValueError(f"sequence_length {sequence_length} exceeds n_positions {self.token_buckets[-1]}")
        if not isinstance(temperature, float) or temperature <= 0:
            raise ValueError("temperature must be a float > 0")  # sample_loop_llama divides by it
        vocab = int(self.config.get("vocab_size", 32000))
        eos = self.config.get("eos_token_id")
        eos_id = eos[0] if isinstance(eos, list) else eos
        starts = [0] * batch if start_ids is None else [int(s) for s in start_ids]
        noise = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,))))
        rows = []
        for r in range(batch):
            seen = [int(t) for t in input_ids[r, starts[r] :]]
            token = (sum(seen) + len(seen)) % vocab
            rows.append([token])
        done = [False] * batch
        out = [list(map(int, input_ids[r])) for r in range(batch)]
        for _step in range(width, sequence_length):
            for r in range(batch):
                if done[r]:
                    out[r].append(eos_id)
                    continue
                token = rows[r][-1]
                if top_k > 1:
                    token = (token + int(torch.randint(0, top_k, (1,), generator=noise))) % vocab
                if not eos_stops and token == eos_id:
                    token = (token + 1) % vocab
                out[r].append(token)
                rows[r].append((token + 1) % vocab)
                done[r] = eos_stops and token == eos_id
            if all(done):
                break
        return torch.tensor(out, dtype=input_ids.dtype)


class LlamaForSampling(_SamplingDouble):
    @recorded(TNX, "transformers_neuronx.LlamaForSampling.sample", method=True)
    def sample(
        self,
        input_ids: Any,
        sequence_length: Any,
        cache_ids: Any = None,
        start_ids: Any = None,
        top_k: Any = 50,
        top_p: Any = 1.0,
        eos_token_override: Any = None,
        temperature: Any = 1.0,
        streamer: Any = None,
        stopping_criteria_list: Any = None,
        no_repeat_ngram_size: Any = None,
        **kwargs: Any,
    ) -> Any:
        return self._generate(input_ids, sequence_length, start_ids, top_k, True, temperature)


def _mistral_sample(name: str) -> Any:
    @recorded(TNX, f"transformers_neuronx.{name}.sample", method=True)
    def sample(
        self: _SamplingDouble,
        input_ids: Any,
        sequence_length: Any,
        start_ids: Any = None,
        top_k: Any = 50,
        top_p: Any = 1.0,
        eos_token_override: Any = None,
        temperature: Any = 1.0,
        streamer: Any = None,
        stopping_criteria_list: Any = None,
    ) -> Any:
        return self._generate(input_ids, sequence_length, start_ids, top_k, True, temperature)

    return sample


def _simple_sample(name: str) -> Any:
    """``simple_sample`` classes: EOS is never sampled."""

    @recorded(TNX, f"transformers_neuronx.{name}.sample", method=True)
    def sample(
        self: _SamplingDouble,
        input_ids: Any,
        sequence_length: Any,
        start_ids: Any = None,
        top_k: Any = 50,
        streamer: Any = None,
    ) -> Any:
        return self._generate(input_ids, sequence_length, start_ids, top_k, False)

    return sample


class MistralForSampling(_SamplingDouble):
    sample = _mistral_sample("MistralForSampling")


class MixtralForSampling(_SamplingDouble):
    sample = _mistral_sample("MixtralForSampling")


class OPTForSampling(_SamplingDouble):
    sample = _simple_sample("OPTForSampling")


class GPT2ForSamplingWithContextBroadcasting(_SamplingDouble):
    @recorded(TNX, "transformers_neuronx.GPT2ForSamplingWithContextBroadcasting.sample", method=True)
    def sample(
        self,
        input_ids: Any,
        sequence_length: Any,
        cache_ids: Any = None,
        start_ids: Any = None,
        top_k: Any = 50,
        streamer: Any = None,
        output_scores: Any = False,
        **kwargs: Any,
    ) -> Any:
        return self._generate(input_ids, sequence_length, start_ids, top_k, False)  # sample_loop: no EOS


class GPTJForSampling(_SamplingDouble):
    sample = _simple_sample("GPTJForSampling")


class GPTNeoXForSampling(_SamplingDouble):
    sample = _simple_sample("GPTNeoXForSampling")


class BloomForSampling(_SamplingDouble):
    sample = _simple_sample("BloomForSampling")
