"""The recorded Neuron SDK signatures: the extractor, the checked-in records and their loader.

``scripts/record_sdk_signatures.py`` is run here on a small synthetic package written into
tmp_path (kwargs.pop-style config classes, forwarding constructors, keyword-only arguments, an rst
API reference), and its output is compared with what it must be. The checked-in records under
``tests/fixtures/sdk_signatures/`` must name their source, cover every name neuronc calls, and
load back into ``inspect.Signature`` objects that refuse an unknown keyword. No network.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import sdk_signatures as sigs

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
NXDI_HF = "neuronx_distributed_inference.utils.hf_adapter"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location("record_sdk_signatures", SCRIPTS / "record_sdk_signatures.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SCRIPTS))


# ------------------------------------------------------------------------------------------------
# The extractor, on a synthetic package
# ------------------------------------------------------------------------------------------------

SYNTHETIC: dict[str, str] = {
    "src/fakesdk/__init__.py": """
        from fakesdk.config import StrictConfig, WarnConfig
        from .models.base import Derived as ExportedModel
    """,
    "src/fakesdk/_version.py": '__version__ = "1.2.3"\n',
    "src/fakesdk/config.py": """
        import logging


        class StrictConfig:
            def __init__(self, **kwargs):
                self.a = kwargs.pop("a", 1)
                if "b" in kwargs:
                    self.b = kwargs.pop("b")
                self.c = self._take(kwargs)
                if kwargs:
                    raise TypeError(f"unexpected {kwargs}")

            def _take(self, kw):
                return kw.pop("c", [1, 2])


        class WarnConfig:
            def __init__(self, **kwargs):
                self.x = kwargs.pop("x", "left")
                if kwargs:
                    logging.warning("ignored %s", kwargs)
                self.late = kwargs.pop("late", None)


        class MoreConfig(WarnConfig):
            def __init__(self, extra=None, glu=True, **kwargs):
                self.extra = extra
                self.s = kwargs.pop("s", 0)
                super().__init__(**kwargs)


        class StoringConfig:
            def __init__(self, base, **kwargs):
                self.base = base
                for key, value in kwargs.items():
                    setattr(self, key, value)


        class Sampling:
            def __init__(self, **kwargs):
                self.top_k = kwargs.pop("top_k", 1)
    """,
    "src/fakesdk/models/__init__.py": "",
    "src/fakesdk/models/base.py": """
        from fakesdk.config import StrictConfig, WarnConfig


        class Base:
            def __init__(self, path, config=None, *, flag=False):
                self.path = path

            def compile(self, out, debug=False, *, dry_run=False):
                pass

            @classmethod
            def get_config_cls(cls):
                return StrictConfig

            @classmethod
            def get_neuron_config_cls(cls):
                return cls.get_config_cls()

            @staticmethod
            def util(x, /, y, *args, z, **kw):
                pass


        class Derived(Base):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)

            @classmethod
            def get_config_cls(cls):
                return WarnConfig


        class Pinned(Base):
            def __init__(self, *args, **kwargs):
                super().__init__("fixed", *args, **kwargs)


        TABLE = {"derived": {"causal-lm": Derived}, "other": "text"}
    """,
    "src/fakesdk/sampling.py": """
        def override(self, kwargs):
            for key, value in kwargs.items():
                if not hasattr(self, key):
                    raise KeyError(key)
                setattr(self, key, value)


        class ArchConfig:
            def __init__(self, config, batch_size, **kwargs):
                self.n_positions = config.n_positions
                self.vocab_size = config.vocab_size
                override(self, kwargs)


        class ForSampling:
            def __init__(self, config, *, batch_size=1, **kwargs):
                self.config = ArchConfig(config, batch_size, **kwargs)

            @classmethod
            def from_pretrained(cls, path, *model_args, **kwargs):
                def check(**kw):
                    return kw.get("context_length_estimate")

                check(**kwargs)
                return cls(path, *model_args, **kwargs)


        class AssertConfig:
            def __init__(self, **kwargs):
                self.k = kwargs.pop("k", 0)
                assert len(kwargs) == 0, kwargs
    """,
    "docs/api/trace.rst": """
        Tracing
        =======

        .. py:function:: fakesdk.trace(func, example_inputs, *_, workdir=None, args={}, cpu=False)

            Trace.

            :arg ~torch.nn.Module func: the module.
            :keyword str,list[str] args: compiler arguments.
    """,
}

NAMES = [
    "fakesdk.StrictConfig",
    "fakesdk.WarnConfig",
    "fakesdk.config.MoreConfig",
    "fakesdk.config.StoringConfig",
    "fakesdk.config.Sampling",
    "fakesdk.ExportedModel",
    "fakesdk.ExportedModel.compile",
    "fakesdk.ExportedModel.get_neuron_config_cls",
    "fakesdk.models.base.Pinned",
    "fakesdk.models.base.Base.util",
    "fakesdk.models.base.TABLE",
    "fakesdk.sampling.ForSampling",
    "fakesdk.sampling.ForSampling.from_pretrained",
    "fakesdk.sampling.AssertConfig",
    "fakesdk.models.base.Nope",
    "fakesdk.models.missing.Thing",
]


def P(name: str, kind: str = "POSITIONAL_OR_KEYWORD", default: str | None = None) -> dict[str, Any]:
    return {"name": name, "kind": kind, "default": default}


@pytest.fixture
def synthetic(tmp_path: Path) -> Path:
    for rel, text in SYNTHETIC.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return tmp_path


@pytest.fixture
def record(script: ModuleType, synthetic: Path) -> dict[str, Any]:
    names = [script.Name(n, config=n.endswith(("Config", ".config.Sampling"))) for n in NAMES]
    names.append(script.Name("fakesdk.ExportedModel.get_config_cls", returns="class"))
    pkg = script.Package("fake-sdk", "fakesdk", "https://github.com/example/fake-sdk")
    return dict(script.build_record(pkg, synthetic, ref="v1.2.3", commit="a" * 40, names=names))


def test_extracts_kwargs_pop_config_classes(record: dict[str, Any]) -> None:
    names = record["names"]
    strict = names["fakesdk.StrictConfig"]
    assert strict["defined_in"] == "fakesdk.config.StrictConfig"
    assert strict["source"] == {"path": "src/fakesdk/config.py", "line": 4}
    assert strict["parameters"] == [P("kwargs", "VAR_KEYWORD")]
    # "b" is read with `in` and popped without a default; "c" is popped in a helper handed the dict.
    assert strict["fields"] == {"a": "1", "b": None, "c": "[1, 2]"}
    assert strict["field_sources"] == {"src/fakesdk/config.py": {"a": 6, "b": 7, "c": 14}}
    assert strict["accepts_unknown"] is False
    assert strict["unknown_kwargs"] == "error"
    assert strict["unknown_kwargs_source"] == "src/fakesdk/config.py:10"

    warn = names["fakesdk.WarnConfig"]
    assert warn["fields"] == {"x": '"left"', "late": "None"}
    assert (warn["accepts_unknown"], warn["unknown_kwargs"]) == (True, "warn")
    assert warn["var_keyword"]["keys_read_after_unknown_check"] == ["late"]

    more = names["fakesdk.config.MoreConfig"]
    assert more["bases"] == ["fakesdk.config.WarnConfig"]
    assert more["parameters"] == [P("extra", default="None"), P("glu", default="True"), P("kwargs", "VAR_KEYWORD")]
    assert more["fields"] == {"extra": "None", "glu": "True", "s": "0", "x": '"left"', "late": "None"}
    assert (more["accepts_unknown"], more["unknown_kwargs"]) == (True, "warn")
    assert more["var_keyword"]["forwards"] == [
        {
            "call": "super().__init__",
            "target": "fakesdk.config.WarnConfig.__init__",
            "unresolved": None,
            "source": "src/fakesdk/config.py:29",
        }
    ]
    assert more["var_keyword"]["keys_read_after_unknown_check"] == ["late"]

    storing = names["fakesdk.config.StoringConfig"]
    assert (storing["fields"], storing["accepts_unknown"], storing["unknown_kwargs"]) == (
        {"base": None},
        True,
        "stored",
    )
    sampling = names["fakesdk.config.Sampling"]
    assert (sampling["fields"], sampling["accepts_unknown"], sampling["unknown_kwargs"]) == (
        {"top_k": "1"},
        True,
        "ignored",
    )


def test_extracts_methods_forwarding_and_returns(record: dict[str, Any]) -> None:
    names = record["names"]
    model = names["fakesdk.ExportedModel"]
    assert model["defined_in"] == "fakesdk.models.base.Derived"
    assert model["parameters"] == [P("args", "VAR_POSITIONAL"), P("kwargs", "VAR_KEYWORD")]
    assert model["effective_parameters"] == [P("path"), P("config", default="None"), P("flag", "KEYWORD_ONLY", "False")]
    assert model["constructor"]["defined_in"] == "fakesdk.models.base.Derived.__init__"

    pinned = names["fakesdk.models.base.Pinned"]  # super().__init__("fixed", *args, **kwargs) fills `path`
    assert pinned["effective_parameters"] == [P("config", default="None"), P("flag", "KEYWORD_ONLY", "False")]

    compile_ = names["fakesdk.ExportedModel.compile"]
    assert compile_ == {
        "kind": "method",
        "binding": "instance",
        "defined_in": "fakesdk.models.base.Base.compile",
        "source": {"path": "src/fakesdk/models/base.py", "line": 8},
        "parameters": [P("self"), P("out"), P("debug", default="False"), P("dry_run", "KEYWORD_ONLY", "False")],
    }
    util = names["fakesdk.models.base.Base.util"]
    assert util["binding"] == "staticmethod"
    assert [(p["name"], p["kind"]) for p in util["parameters"]] == [
        ("x", "POSITIONAL_ONLY"),
        ("y", "POSITIONAL_OR_KEYWORD"),
        ("args", "VAR_POSITIONAL"),
        ("z", "KEYWORD_ONLY"),
        ("kw", "VAR_KEYWORD"),
    ]
    # Derived overrides get_config_cls; the inherited get_neuron_config_cls calls it through cls.
    assert names["fakesdk.ExportedModel.get_neuron_config_cls"]["returns"] == "fakesdk.config.WarnConfig"
    assert names["fakesdk.ExportedModel.get_config_cls"]["returns"] == "fakesdk.config.WarnConfig"
    assert "fakesdk.config.WarnConfig" in names  # the returned class is recorded too


def test_follows_kwargs_into_helpers_and_forward_targets(record: dict[str, Any]) -> None:
    names = record["names"]
    # ArchConfig's helper only overrides attributes already set (transformers-neuronx's
    # maybe_override_attributes): those are the keys **kwargs may carry; anything else raises.
    ctor = names["fakesdk.sampling.ForSampling"]["var_keyword"]
    assert ctor["keys"] == {"n_positions": "config.n_positions", "vocab_size": "config.vocab_size"}
    assert (ctor["unknown"], ctor["unknown_source"]) == ("error", "src/fakesdk/sampling.py:2")
    fp = names["fakesdk.sampling.ForSampling.from_pretrained"]
    assert fp["effective_parameters"] == [
        P("path"),
        P("batch_size", "KEYWORD_ONLY", "1"),
        P("kwargs", "VAR_KEYWORD"),
    ]
    # check() reads context_length_estimate, but the same dict reaches the constructor, which refuses it.
    assert fp["var_keyword"]["keys"] == {
        "batch_size": "1",
        "n_positions": "config.n_positions",
        "vocab_size": "config.vocab_size",
    }
    assert fp["var_keyword"]["unknown"] == "error"
    asserted = names["fakesdk.sampling.AssertConfig"]
    assert (asserted["fields"], asserted["accepts_unknown"], asserted["unknown_kwargs_source"]) == (
        {"k": "0"},
        False,
        "src/fakesdk/sampling.py:31",
    )


def test_records_data_missing_names_and_provenance(record: dict[str, Any]) -> None:
    assert record["data"]["fakesdk.models.base.TABLE"]["value"] == {
        "derived": {"causal-lm": {"ref": "fakesdk.models.base.Derived"}},
        "other": "text",
    }
    assert record["missing"] == {
        "fakesdk.models.base.Nope": "module fakesdk.models.base (src/fakesdk/models/base.py) has no attribute 'Nope'",
        "fakesdk.models.missing.Thing": "module fakesdk.models (src/fakesdk/models/__init__.py) has no attribute 'missing'",
        # get_config_cls(returns="class") also asks for the returned class's load and get_neuron_config_cls.
        "fakesdk.config.WarnConfig.get_neuron_config_cls": (
            "class fakesdk.config.WarnConfig has no attribute 'get_neuron_config_cls'"
        ),
        "fakesdk.config.WarnConfig.load": "class fakesdk.config.WarnConfig has no attribute 'load'",
    }
    assert (record["package"], record["ref"], record["commit"], record["source_version"]) == (
        "fake-sdk",
        "v1.2.3",
        "a" * 40,
        "1.2.3",
    )


def test_loader_binds_against_the_synthetic_record(record: dict[str, Any]) -> None:
    strict = sigs.signature_of(record, "fakesdk.StrictConfig")
    assert str(strict) == "(*, a=1, b=<unspecified>, c=[1, 2])"
    strict.bind(a=2, c=[3])
    with pytest.raises(TypeError, match="unexpected keyword argument 'd'"):
        strict.bind(d=1)
    # WarnConfig drops unknown keys with a warning: the strict signature refuses them.
    with pytest.raises(TypeError):
        sigs.signature_of(record, "fakesdk.WarnConfig").bind(typo=1)
    assert sigs.accepts_unknown(record, "fakesdk.WarnConfig") is True
    # StoringConfig keeps unknown keys on purpose: **kwargs stays.
    sigs.signature_of(record, "fakesdk.config.StoringConfig").bind("b", anything=1)
    model = sigs.signature_of(record, "fakesdk.ExportedModel")
    assert str(model) == "(path, config=None, *, flag=False)"
    model.bind("/p", None, flag=True)
    with pytest.raises(TypeError):
        model.bind("/p", neuron_config=None)
    assert str(sigs.signature_of(record, "fakesdk.ExportedModel.compile")) == "(out, debug=False, *, dry_run=False)"
    with pytest.raises(KeyError, match=re.escape("does not exist in fake-sdk at v1.2.3")):
        sigs.signature_of(record, "fakesdk.models.base.Nope")


def test_script_cli_writes_the_record(script: ModuleType, tmp_path: Path) -> None:
    docs = tmp_path / "sdk" / "frameworks/torch/torch-neuronx/api-reference-guide/inference"
    docs.mkdir(parents=True)
    (docs / "trace.rst").write_text(
        ".. py:function:: torch_neuronx.trace(func, example_inputs, *_, compiler_args=None)\n", encoding="utf-8"
    )
    out = tmp_path / "out"
    argv = ["torch-neuronx", "--source", str(tmp_path / "sdk"), "--ref", "v9", "--commit", "b" * 40]
    assert script.main([*argv, "--out", str(out), "--sdk-release", "9.9", "--note", "test"]) == 0
    written = json.loads((out / "torch-neuronx@v9.json").read_text(encoding="utf-8"))
    assert (written["commit"], written["sdk_release"], written["missing"]) == ("b" * 40, "9.9", {})
    assert [p["name"] for p in written["names"]["torch_neuronx.trace"]["parameters"]] == [
        "func",
        "example_inputs",
        "_",
        "compiler_args",
    ]
    with pytest.raises(SystemExit):  # not a git work tree and no --commit
        script.main([*argv[:5], "--out", str(out)])


def test_script_refuses_a_checkout_without_the_package(script: ModuleType, synthetic: Path) -> None:
    with pytest.raises(SystemExit, match=re.escape("no neuronx_distributed_inference/__init__.py")):
        script.build_record(script.package_named("nxdi"), synthetic, ref="x", commit="c" * 40)


def test_rst_reference_is_parsed(script: ModuleType, synthetic: Path) -> None:
    pkg = script.Package("fake-docs", "fakesdk", "https://github.com/example/docs", docs_dir="docs")
    names = [script.Name("fakesdk.trace"), script.Name("fakesdk.analyze")]
    rec = script.build_record(pkg, synthetic, ref="v1", commit="d" * 40, names=names)
    assert rec["names"]["fakesdk.trace"] == {
        "kind": "function",
        "defined_in": "fakesdk.trace",
        "source": {"path": "docs/api/trace.rst", "line": 4},
        "parameters": [
            P("func"),
            P("example_inputs"),
            P("_", "VAR_POSITIONAL"),
            P("workdir", "KEYWORD_ONLY", "None"),
            P("args", "KEYWORD_ONLY", "{}"),
            P("cpu", "KEYWORD_ONLY", "False"),
        ],
        "documented_parameters": ["func", "args"],
    }
    assert list(rec["missing"]) == ["fakesdk.analyze"]


# ------------------------------------------------------------------------------------------------
# The checked-in records
# ------------------------------------------------------------------------------------------------

PACKAGES = ("neuronx-distributed-inference", "neuronx-distributed", "transformers-neuronx", "torch-neuronx")


def test_every_record_names_its_source() -> None:
    seen = set()
    for rec in sigs.records():
        where = f"{rec['package']}@{rec['ref']}"
        assert rec["schema"] == 1, where
        assert rec["repository"].startswith("https://github.com/aws-neuron/"), where
        assert re.fullmatch(r"[0-9a-f]{40}", rec["commit"]), where
        assert rec["ref"] and rec["note"], where
        assert rec["generated_by"] == "scripts/record_sdk_signatures.py", where
        path = sigs.FIXTURES / f"{rec['package']}@{rec['ref']}.json"
        assert path.is_file(), f"{where}: file name does not match package@ref"
        for entry in rec["names"].values():
            assert entry["kind"] in ("class", "function", "method")
            assert entry["source"]["path"] and entry["source"]["line"] > 0
        seen.add(rec["package"])
    assert seen == set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_the_target_sdk_release_has_one_record(package: str) -> None:
    rec = sigs.load_record(package)
    assert rec["sdk_release"] == sigs.TARGET_SDK_RELEASE
    assert sigs.load_record(package, rec["ref"]) is rec
    with pytest.raises(LookupError):
        sigs.load_record(package, "no-such-ref")


def test_records_round_trip_through_the_loader() -> None:
    for rec in sigs.records():
        for qualname, entry in rec["names"].items():
            if entry.get("parameters") is None and "effective_parameters" not in entry:
                continue
            loose = sigs.signature_of(rec, qualname, strict=False)
            expected = sigs._as_called(entry)
            assert [(p.name, p.kind.name) for p in loose.parameters.values()] == [
                (p["name"], p["kind"]) for p in expected
            ], qualname
            for p in expected:
                default = loose.parameters[p["name"]].default
                if p["default"] is None:
                    assert default is inspect.Parameter.empty
                else:
                    assert repr(default) == p["default"]
            strict = sigs.signature_of(rec, qualname)
            if "fields" in entry:
                assert set(sigs.config_fields(rec, qualname)) <= set(strict.parameters), qualname


def test_every_name_neuronc_calls_is_recorded(script: ModuleType) -> None:
    wanted = {pkg: {n.qualname for n in names} for pkg, names in script.RECORD.items()}
    for package, calls in script.NEURONC_CALLS.items():
        assert set(calls) <= wanted[package], f"{package}: add to RECORD: {sorted(set(calls) - wanted[package])}"
        for rec in sigs.records(package):
            unrecorded = [q for q in calls if q not in rec["names"] and q not in rec["missing"]]
            assert not unrecorded, f"{package}@{rec['ref']}: regenerate; not recorded: {unrecorded}"
            for qualname in calls:  # the classes get_config_cls()/get_neuron_config_cls() return
                returned = rec["names"].get(qualname, {}).get("returns")
                assert returned is None or returned in rec["names"], (qualname, returned)


def test_neuronc_calls_list_follows_the_backends(script: ModuleType) -> None:
    from neuronc.backends.neuron import nxdi, transformers_neuronx

    nxdi_calls = script.NEURONC_CALLS["neuronx-distributed-inference"]
    for module, cls in nxdi.MODEL_CLASSES.values():
        for suffix in ("", ".compile", ".load", ".get_neuron_config_cls", ".get_config_cls"):
            assert f"{module}.{cls}{suffix}" in nxdi_calls
    tnx_calls = script.NEURONC_CALLS["transformers-neuronx"]
    for cls in transformers_neuronx.MODEL_CLASSES.values():
        for suffix in ("", ".from_pretrained", ".to_neuron", ".cpu_compile", ".save", ".load"):
            assert f"transformers_neuronx.{cls}{suffix}" in tnx_calls
    for file_line in (loc.split(" ")[0] for calls in script.NEURONC_CALLS.values() for loc in calls.values()):
        path, _, line = file_line.partition(":")
        assert (REPO / path).is_file() and int(line) > 0, file_line


def test_companion_keys_reach_config_fields() -> None:
    rec = sigs.load_record("neuronx-distributed-inference")
    moe = "neuronx_distributed_inference.models.config.MoENeuronConfig"
    fields = sigs.config_fields(rec, moe)
    # MoENeuronConfig hands its **kwargs to NxD's RouterConfig.from_kwargs (the companion record).
    assert {"router_act_fn", "router_dtype", "capacity_factor", "tp_degree"} <= set(fields)
    assert "router_act_fn" not in sigs.config_fields(rec, moe, companions=False)
    sigs.signature_of(rec, moe).bind(router_act_fn="sigmoid", glu_mlp=False, tp_degree=2)


def test_calls_built_from_the_shipped_profiles_bind_at_the_target_release() -> None:
    """What neuronc passes for its shipped Neuron profiles is accepted by the SDK 2.26.1 signatures."""
    from neuronc.backends.neuron import nxdi, torch_neuronx, transformers_neuronx
    from neuronc.profile import load_profile

    (spec,) = load_profile(REPO / "profiles/llama3.1-8b-instruct-nxdi-inf2.yaml").specs
    rec = sigs.load_record("neuronx-distributed-inference")
    module, cls = nxdi.MODEL_CLASSES["llama"]
    model = f"{module}.{cls}"
    neuron_config = sigs.entry(rec, f"{model}.get_neuron_config_cls")["returns"]
    sigs.signature_of(rec, neuron_config).bind(**nxdi.neuron_config_kwargs(spec))
    sigs.signature_of(rec, sigs.entry(rec, f"{model}.get_config_cls")["returns"]).bind("nc", load_config="hook")
    sigs.signature_of(rec, f"{NXDI_HF}.load_pretrained_config").bind("/c")
    sigs.signature_of(rec, model).bind("/checkpoint", "config")
    sigs.signature_of(rec, f"{model}.compile").bind("/out/")
    sigs.signature_of(rec, f"{model}.load").bind("/out/")

    rec = sigs.load_record("transformers-neuronx")
    for profile in ("llama2-13b-tnx-inf2-tp12.yaml", "opt-6.7b-tnx-inf2-tp2.yaml"):
        (spec,) = load_profile(REPO / "profiles" / profile).specs
        cls = transformers_neuronx.MODEL_CLASSES["opt" if "opt" in profile else "llama"]
        sigs.signature_of(rec, f"transformers_neuronx.{cls}.from_pretrained").bind(
            "/checkpoint", **transformers_neuronx.from_pretrained_kwargs(spec)
        )
        sigs.signature_of(rec, f"transformers_neuronx.{cls}.save").bind("/neff")
        sigs.signature_of(rec, f"transformers_neuronx.{cls}.load").bind("/neff")

    spec = load_profile(REPO / "profiles/minilm-encoder-torch-neuronx.yaml").specs[0]
    rec = sigs.load_record("torch-neuronx")
    args = torch_neuronx.compiler_args(spec, {})
    sigs.signature_of(rec, "torch_neuronx.trace").bind(
        "model", ("ids", "mask"), compiler_workdir="/w", compiler_args=args, cpu_backend=True
    )
