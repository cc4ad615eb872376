"""Recorded upstream signatures of the Neuron SDK APIs neuronc calls (no SDK needed).

The records in ``tests/fixtures/sdk_signatures/`` are written by ``scripts/record_sdk_signatures.py``
from the upstream sources at a named tag and commit (format: that directory's README.md). This
module reads them for the SDK test doubles and the tests:

    record = load_record("neuronx-distributed-inference")          # the SDK release neuronc targets
    sig = signature_of(record, "neuronx_distributed_inference.models.config.NeuronConfig")
    sig.bind(**kwargs)                                               # TypeError for an unknown key

``signature_of`` is strict by default: a ``**kwargs`` that the real code drops (with or without a
warning) or refuses is replaced by the keys it is known to read, so binding an unknown keyword
raises ``TypeError``. Where the SDK stores unknown keys on purpose (``InferenceConfig``'s HF
attributes) or where the record could not follow the dict, ``**kwargs`` stays.
"""

from __future__ import annotations

import functools
import inspect
import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "sdk_signatures"
# The Neuron SDK release neuronc targets: the one optimum-neuron 0.4.5 pins (``__sdk_version__``).
TARGET_SDK_RELEASE = "2.26.1"
# What an unknown keyword meets, per ``var_keyword.unknown``: whether a strict signature keeps ``**kwargs``.
_KEEPS_VAR_KEYWORD = {"stored": True, "unresolved": True, "error": False, "warn": False, "ignored": False}


class SourceDefault:
    """A parameter default as recorded: its source text (``repr`` shows it, so ``str(sig)`` reads naturally)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SourceDefault) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


# The default of a key read from **kwargs without one in the read itself (``"key" in kwargs``).
UNSPECIFIED = SourceDefault("<unspecified>")


@functools.cache
def _all_records() -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(p.read_text(encoding="utf-8")) for p in sorted(FIXTURES.glob("*@*.json")))


def records(package: str | None = None) -> list[dict[str, Any]]:
    """Every record (of one package, by distribution name), oldest file name first."""
    return [r for r in _all_records() if package is None or r["package"] == package]


def load_record(package: str, ref: str | None = None) -> dict[str, Any]:
    """The record of ``package`` at ``ref``; without ``ref``, the one standing for ``TARGET_SDK_RELEASE``."""
    candidates = records(package)
    if not candidates:
        raise LookupError(f"no recorded signatures for {package!r} in {FIXTURES}")
    if ref is None:
        chosen = [r for r in candidates if r.get("sdk_release") == TARGET_SDK_RELEASE]
        what = f"Neuron SDK {TARGET_SDK_RELEASE}"
    else:
        chosen = [r for r in candidates if r["ref"] == ref]
        what = f"ref {ref!r}"
    if len(chosen) != 1:
        refs = ", ".join(f"{r['ref']} (SDK {r.get('sdk_release')})" for r in candidates)
        raise LookupError(f"{package}: {len(chosen)} records for {what}; recorded: {refs}")
    return chosen[0]


def entry(record: dict[str, Any], qualname: str) -> dict[str, Any]:
    """The recorded entry of a class, function or method; KeyError naming why when it is missing."""
    if qualname in record["names"]:
        return dict(record["names"][qualname])
    where = f"{record['package']} at {record['ref']} ({record['commit'][:10]})"
    if qualname in record["missing"]:
        raise KeyError(f"{qualname} does not exist in {where}: {record['missing'][qualname]}")
    raise KeyError(f"{qualname} was not recorded for {where}; add it to RECORD in scripts/record_sdk_signatures.py")


def data_of(record: dict[str, Any], qualname: str) -> Any:
    """A recorded module-level table (class references as ``{"ref": qualname}``)."""
    return record["data"][qualname]["value"]


def _parameter(p: dict[str, Any]) -> inspect.Parameter:
    default = inspect.Parameter.empty if p["default"] is None else SourceDefault(p["default"])
    if p["kind"] in ("VAR_POSITIONAL", "VAR_KEYWORD"):
        default = inspect.Parameter.empty
    return inspect.Parameter(p["name"], getattr(inspect.Parameter, p["kind"]), default=default)


def _as_called(e: dict[str, Any]) -> list[dict[str, Any]]:
    """Parameters as a caller sees them: behind any forwarding, without ``self``/``cls``."""
    if "effective_parameters" in e:
        return list(e["effective_parameters"])
    params = list(e["parameters"] or [])
    if e["kind"] == "method" and e.get("binding") in ("instance", "classmethod", "property") and params:
        params = params[1:]
    return params


def signature_of(record: dict[str, Any], qualname: str, *, strict: bool = True) -> inspect.Signature:
    """The signature a call to ``qualname`` binds against (a class: its constructor, without ``self``)."""
    e = entry(record, qualname)
    if e.get("parameters") is None and "effective_parameters" not in e:
        raise ValueError(f"{qualname}: constructor defined outside the recorded source ({e['constructor']})")
    params = _as_called(e)
    if strict:
        var_kw = e.get("var_keyword")
        keys: dict[str, str | None] = {}
        keep = True
        if "fields" in e:
            keys = config_fields(record, qualname)
            keep = e.get("unknown_kwargs") == "stored" or e.get("accepts_unknown") is None
        elif var_kw is not None:
            keys = dict(var_kw["keys"])
            keep = _KEEPS_VAR_KEYWORD.get(var_kw["unknown"], True)
        if keys or not keep:
            named = {p["name"] for p in params}
            tail = [p for p in params if p["kind"] == "VAR_KEYWORD"] if keep else []
            params = [p for p in params if p["kind"] != "VAR_KEYWORD"]
            params += [{"name": k, "kind": "KEYWORD_ONLY", "default": d} for k, d in keys.items() if k not in named]
            params += tail
    built = []
    for p in params:
        param = _parameter(p)
        if p["kind"] == "KEYWORD_ONLY" and p["default"] is None and p["name"] in _read_keys(e, record, qualname):
            param = param.replace(default=UNSPECIFIED)  # read from **kwargs with no default: optional
        built.append(param)
    return inspect.Signature(built)


def _read_keys(e: dict[str, Any], record: dict[str, Any], qualname: str) -> set[str]:
    if "fields" in e:
        explicit = {p["name"] for p in _as_called(e)}
        return set(config_fields(record, qualname)) - explicit
    return set((e.get("var_keyword") or {}).get("keys", {}))


def config_fields(record: dict[str, Any], qualname: str, *, companions: bool = True) -> dict[str, str | None]:
    """Every keyword a config class's constructor takes: name -> default's source text (None: no default).

    With ``companions``, keys read by another package the ``**kwargs`` is forwarded to (NxDI's
    ``MoENeuronConfig`` -> NxD's ``RouterConfig.from_kwargs``) come from that package's record of the
    same SDK release (the record's ``companions``).
    """
    e = entry(record, qualname)
    if "fields" not in e:
        raise ValueError(f"{qualname} was not recorded as a config class (Name(..., config=True))")
    fields: dict[str, str | None] = dict(e["fields"])
    if companions:
        for forward in (e.get("var_keyword") or {}).get("forwards", []):
            target = forward.get("unresolved")
            other = _companion_for(record, target) if target else None
            if other is None or target not in other["names"]:
                continue
            found = other["names"][target]
            for p in _as_called(found):
                if p["kind"] in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY"):
                    fields.setdefault(p["name"], p["default"])
            for key, default in (found.get("var_keyword") or {}).get("keys", {}).items():
                fields.setdefault(key, default)
    return fields


def _companion_for(record: dict[str, Any], qualname: str) -> dict[str, Any] | None:
    for dist, ref in (record.get("companions") or {}).items():
        other = load_record(dist, ref)
        if qualname.split(".")[0] == other["import_name"]:
            return other
    return None


def accepts_unknown(record: dict[str, Any], qualname: str) -> bool | None:
    """Whether the real callable accepts a keyword it does not know (None: the record cannot tell).

    True also when it drops the key with only a warning (``unknown_kwargs: warn``) or silently.
    """
    e = entry(record, qualname)
    if "accepts_unknown" in e:
        value = e["accepts_unknown"]
        return None if value is None else bool(value)
    var_kw = e.get("var_keyword")
    if var_kw is None:
        return False
    return {"error": False, "unresolved": None}.get(var_kw["unknown"], True)
