"""neuronc.backends.vllm_neuron.facts agrees with the recorded facts (tests/fixtures/vllm_neuron/facts.json).

The doubles read facts.json to behave as the plugin does; the backend reads facts.py. If one of them
changes alone, the doubles would test the backend against a plugin that is not the one it targets.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from neuronc.backends.vllm_neuron import facts

FACTS = json.loads((Path(__file__).parent / "fixtures" / "vllm_neuron" / "facts.json").read_text(encoding="utf-8"))


def test_every_fact_cites_a_recorded_source() -> None:
    sources = set(FACTS["sources"])
    for section in ("cache", "env", "engine", "dlc"):
        cited = FACTS[section]["sources"]
        assert cited and set(cited) <= sources, (section, cited)


def test_the_cache_layout_is_the_recorded_one() -> None:
    cache: dict[str, Any] = FACTS["cache"]
    assert cache["root"] == facts.CACHE_SUBDIR and cache["root_env"] == facts.CACHE_ROOT_ENV
    assert facts.ENTRY_NAME.pattern == cache["entry_name"]
    assert cache["hlo"] == facts.HLO_FILE and cache["neff"] == facts.NEFF_FILE
    assert cache["complete"] == facts.COMPLETE_FILE and cache["accessed"] == facts.ACCESSED_FILE
    assert cache["metadata_key_field"] == facts.METADATA_KEY_FIELD
    assert facts.METADATA_FILE.match(cache["metadata"].format(version=0))
    key = "0" * cache["key"]["hex_chars"]
    assert facts.ENTRY_NAME.match(key)
    lock = cache["lock_metadata"].format(key=key)
    assert facts.LOCK_METADATA.match(lock) and facts.LOCK_METADATA.match(lock + cache["lock_suffix"])


def test_the_environment_names_are_the_recorded_ones() -> None:
    env: dict[str, Any] = FACTS["env"]
    assert env["cpu_compile"] == facts.CPU_COMPILE_ENV and env["target"] == facts.TARGET_ENV
    assert env["fail_on_miss"] == facts.FAIL_ON_MISS_ENV and env["lnc"] == facts.LNC_ENV
    assert list(facts.KV_SIZING_ENV) == env["kv_sizing"]
    for line, names in env["per_plugin"].items():
        recorded = facts.PLUGIN_ENV[line]
        assert {field: getattr(recorded, field) for field in names} == names
    assert facts.plugin_env("0.21.0.1.0.0") is facts.PLUGIN_ENV["0.21"]
    assert facts.plugin_env("0.24.0.1.1.0") is facts.PLUGIN_ENV["0.24"]
    assert facts.plugin_env("0.29.0.1.2.0") is facts.PLUGIN_ENV["0.24"]
    # What the plugin does not read is never what neuronc relies on.
    source = "".join(p.read_text(encoding="utf-8") for p in Path(facts.__file__).parent.glob("*.py"))
    for name in env["not_read_by_the_plugin"]:
        assert not re.search(rf'"{name}"', source), name


def test_the_image_facts_are_the_recorded_ones() -> None:
    dlc: dict[str, Any] = FACTS["dlc"]
    assert list(facts.DLC_ENTRYPOINT) == dlc["entrypoint"]
    assert list(facts.DLC_EXPOSED_PORTS) == dlc["exposed_ports"]
    assert (
        dlc["healthcheck_port"] == facts.DLC_HEALTHCHECK_PORT and dlc["healthcheck_path"] == facts.DLC_HEALTHCHECK_PATH
    )


def test_the_bucket_rules_name_the_recorded_keys() -> None:
    assert set(facts.BUCKET_KEYS) == set(FACTS["engine"]["neuron_config_rules"])
    assert str(facts.DECODE_BUCKET_MULTIPLE) in FACTS["engine"]["neuron_config_rules"]["decode_context_length_buckets"]


def test_the_key_pinning_facts_are_the_recorded_ones() -> None:
    env: dict[str, Any] = FACTS["env"]
    assert env["route"] == facts.ROUTE_ENV
    for line, routes in env["routes"].items():
        assert facts.default_route(f"{line}.0.1.0.0") == routes["default"]
    assert facts.default_route("0.24.0.1.1.0") == env["routes"]["0.21"]["default"]
    assert list(facts.RECORDED_ENV_PREFIXES) == env["recorded_prefixes"]
    assert [p + "*" if p == "nfs" else p for p in facts.REMOTE_FS_PREFIXES] == env["remote_filesystems"]["remote_if"]
    blocks = FACTS["engine"]["kv_blocks"]
    assert blocks["override"] == facts.BLOCKS_OVERRIDE and blocks["cli"] == "--num-gpu-blocks-override"
    assert env["no_compile_in_production"][0] == facts.FAIL_ON_MISS_ENV
