"""One bench: for each bundle, its serving stack under GuideLLM (or its stored results), then the pick.

Per bundle: read its manifest; a Neuron bundle's serving files from ``neuronc.deploy`` (the first of
its backend's stacks that writes a ``docker-compose.yml``) and the pre-boot verdict against their image
(a bundle that would compile at start is measured only with ``allow_compile``, and marked); the stored
results for this host, scenario and GuideLLM version (``results``); for what is missing, start the
stack, wait for ``/health`` within a bound (the time to ready is recorded), run GuideLLM's rate sweep
and its goodput search, stop the stack. A failure of one bundle is its row's error; Ctrl-C stops the
current stack and propagates, with every finished bundle's results stored already.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronc.benchmark import results
from neuronc.benchmark.guidellm import (
    Guidellm,
    GuidellmFailed,
    GuidellmStalled,
    Target,
    Traffic,
    default_traffic,
    goodput_scenario,
    run_bound,
    run_scenario,
    sweep_scenario,
)
from neuronc.benchmark.pick import BundleResult
from neuronc.benchmark.prices import price_of
from neuronc.benchmark.report import read_report
from neuronc.benchmark.slo import Slo
from neuronc.benchmark.stack import Stack, StackFailed, free_port, start_compose, start_cpu
from neuronc.errors import NeuroncError

if TYPE_CHECKING:
    from neuronc.bundle import Manifest
    from neuronc.deploy import ServingValues
    from neuronc.store import BundleStore

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BenchOptions:
    slo: Slo
    traffic: Traffic | None = None  # None: neuronc deploy's sizing for each bundle
    sweep_size: int = 5
    seconds: float = 10.0  # per benchmark of the sweep and per probe of the goodput search
    goodput_probes: int = 6
    health_timeout: float = 300.0
    rerun: bool = False
    allow_compile: bool = False
    prices: Mapping[str, float] = field(default_factory=dict)
    instance_type: str | None = None
    image: str | None = None  # Neuron bundles: the serving image (deploy's --image)
    tokenizer: str | None = None


@dataclass(frozen=True)
class BenchBundle:
    name: str
    path: Path


@dataclass
class Plan:
    """What a bundle needs before anything starts: its key, host, shapes and the scenarios' keys."""

    bundle: BenchBundle
    manifest: Manifest
    values: ServingValues
    key: str
    host: str
    instance: str | None
    concurrency: int
    marks: list[str]
    compose: Path | None = None
    skip: str | None = None  # why the bundle is not measured (the verdict says it would compile)


def _compose_files(plan_dir: Path, bundle: Path, options: BenchOptions, port: int) -> tuple[Path, str | None, int]:
    """Write the deploy files of the first stack that has a compose file; (compose file, image, replicas)."""
    import yaml

    from neuronc.deploy import DeployOptions, Stack, render, write

    deploy_options = DeployOptions(instance_type=options.instance_type, port=port, image=options.image)
    refusals = []
    for stack in Stack:  # deploy says which stacks serve the bundle (exit 2 for the others)
        if stack.value in ("sagemaker", "neuronc"):
            continue
        try:
            rendered = render(bundle, stack, deploy_options)
        except NeuroncError as exc:
            if "cannot serve" not in exc.message and "not served by" not in exc.message:
                refusals.append(f"--for {stack.value}: {exc.message}")
            continue
        compose = next((f for f in rendered.files if f.path == "docker-compose.yml"), None)
        if compose is None:
            refusals.append(f"--for {stack.value}: no docker-compose.yml ({'; '.join(rendered.notes)[:160]})")
            continue
        write(rendered, plan_dir)
        services = yaml.safe_load(compose.text).get("services", {})
        replicas = sum(1 for body in services.values() if isinstance(body, dict) and body.get("devices"))
        return plan_dir / "docker-compose.yml", rendered.image, max(1, replicas)
    raise StackFailed("no serving stack writes a compose file for this bundle: " + " | ".join(refusals))


def _instance(values: ServingValues, options: BenchOptions) -> str | None:
    """The instance the bundle is served on: ``--instance-type``, else deploy's default for its tp degree."""
    from neuronc.hardware import default_instance

    if options.instance_type:
        return options.instance_type.removeprefix("ml.")
    found = default_instance(values.target, values.tp_degree, values.options)
    return None if found is None else found.name


def plan_bundle(bundle: BenchBundle, options: BenchOptions, work: Path, port: int) -> Plan:
    from neuronc.bundle import read_manifest
    from neuronc.deploy import serving_values

    manifest = read_manifest(bundle.path)
    values = serving_values(manifest, bundle.path)
    key = results.bundle_key(manifest.config_hash, manifest.toolchain_key)
    if manifest.target == "cpu":
        return Plan(bundle, manifest, values, key, results.cpu_host(), None, values.batch_size, [])
    instance = _instance(values, options)
    compose, image, replicas = _compose_files(work / "deploy", bundle.path, options, port)
    host = instance or f"{values.target} host"
    plan = Plan(bundle, manifest, values, key, host, instance, values.batch_size * replicas, [], compose)
    _verdict(plan, image, options)
    return plan


def _verdict(plan: Plan, image: str | None, options: BenchOptions) -> None:
    from neuronc.verdict import has_verdict, image_verdict

    if image is None or not has_verdict(plan.manifest):
        plan.marks.append("verdict: cannot tell (no image, or no key neuronc compares for this backend)")
        return
    try:
        verdict = image_verdict(plan.bundle.path, image)
    except NeuroncError as exc:
        plan.marks.append(f"verdict: cannot tell ({exc.message})")
        return
    if verdict.starts_without_compiling:
        return
    if verdict.starts_without_compiling is None:  # cannot tell: measured, and the row says what is unchecked
        plan.marks.append("verdict: cannot tell (" + "; ".join(verdict.lines()) + ")")
        return
    plan.marks.append("compiles at start: " + "; ".join(verdict.lines()))
    if not options.allow_compile:
        plan.skip = "would compile at start (" + "; ".join(verdict.lines()) + "); --allow-compile measures it"


def _tokenizer(plan: Plan, options: BenchOptions) -> str:
    if options.tokenizer:
        return options.tokenizer
    model_dir = plan.bundle.path / "model"
    if (model_dir / "tokenizer.json").is_file() or (model_dir / "tokenizer_config.json").is_file():
        return str(model_dir)
    return plan.manifest.model_id or str(model_dir)


def _scenarios(plan: Plan, options: BenchOptions) -> tuple[Traffic, dict[str, Any], dict[str, Any] | None]:
    values = plan.values
    shape = Target("", "", "", plan.concurrency, values.longest_prompt, values.max_length)
    traffic = (options.traffic or default_traffic(shape)).sized_for(shape)
    sweep = {
        "traffic": traffic.to_json(),
        "concurrency": plan.concurrency,
        "sweep_size": options.sweep_size,
        "seconds": options.seconds,
    }
    objectives = options.slo.goodput_objectives()
    goodput = (
        None
        if objectives is None
        else {
            **sweep,
            "sweep_size": None,
            "objectives": objectives[0],
            "attainment": objectives[1],
            "probes": options.goodput_probes,
        }
    )
    return traffic, sweep, goodput


def measure(
    bundle: BenchBundle,
    options: BenchOptions,
    guidellm: Guidellm,
    store: BundleStore,
    work: Path,
    progress: Progress,
) -> BundleResult:
    """Everything measured (or stored) for one bundle; any failure but Ctrl-C is the row's error."""
    work.mkdir(parents=True, exist_ok=True)
    key = ""
    try:
        port = free_port()
        plan = plan_bundle(bundle, options, work, port)
        key = plan.key
        if plan.skip:
            return BundleResult(bundle.name, key, plan.instance, None, error=plan.skip, marks=tuple(plan.marks))
        return _measure(plan, options, guidellm, store, work, port, progress)
    except (StackFailed, GuidellmFailed) as exc:
        return BundleResult(bundle.name, key, error=str(exc))
    except NeuroncError as exc:
        return BundleResult(bundle.name, key, error=exc.message)


def _measure(
    plan: Plan,
    options: BenchOptions,
    guidellm: Guidellm,
    store: BundleStore,
    work: Path,
    port: int,
    progress: Progress,
) -> BundleResult:
    traffic, sweep_scn, goodput_scn = _scenarios(plan, options)
    wanted = {"sweep": sweep_scn, **({"goodput": goodput_scn} if goodput_scn is not None else {})}
    found: dict[str, results.Measured] = {}
    if not options.rerun:
        for kind, scenario in wanted.items():
            hit = results.find(store, plan.key, results.entry_key(kind, plan.host, scenario, guidellm.version))
            if hit is not None:
                found[kind] = hit
    missing = [kind for kind in wanted if kind not in found]
    price = price_of(plan.instance, options.prices)
    if missing:
        progress(f"{plan.bundle.name}: starting its serving stack")
        stack = _start(plan, port, work)
        try:
            ready = stack.wait_healthy(options.health_timeout)
            progress(f"{plan.bundle.name}: healthy after {ready:.1f} s; GuideLLM {', '.join(missing)}")
            target = Target(
                stack.url,
                stack.served_model(),
                _tokenizer(plan, options),
                plan.concurrency,
                plan.values.longest_prompt,
                plan.values.max_length,
            )
            for kind in missing:
                found[kind] = _run_guidellm(
                    kind, wanted[kind], plan, target, traffic, options, guidellm, work, ready, progress
                )
                results.save(store, plan.key, found[kind])
        finally:
            stack.stop()
    else:
        progress(f"{plan.bundle.name}: stored results (--rerun measures again)")
    sweep = found["sweep"]
    points = tuple(p for m in found.values() for p in m.points)
    search = found["goodput"].goodput_search if "goodput" in found else None
    marks = tuple(plan.marks) + (("stored results",) if not missing else ())
    return BundleResult(
        plan.bundle.name, plan.key, plan.instance, price, points, search, None, sweep.time_to_ready_s, marks
    )


def _start(plan: Plan, port: int, work: Path) -> Stack:
    log = work / "server.log"
    if plan.compose is None:
        return start_cpu(plan.bundle.path, port, log)
    from neuronc.backends.containers import find_runtime

    runtime = find_runtime()
    if runtime is None:
        raise StackFailed("no container runtime (docker or podman, or NEURONC_CONTAINER_RUNTIME) on PATH")
    return start_compose(plan.compose, plan.values.name, port, log, runtime.executable)


def _run_guidellm(
    kind: str,
    scenario: dict[str, Any],
    plan: Plan,
    target: Target,
    traffic: Traffic,
    options: BenchOptions,
    guidellm: Guidellm,
    work: Path,
    ready: float,
    progress: Progress,
) -> results.Measured:
    report_path = work / f"guidellm-{kind}.json"
    report_path.unlink(missing_ok=True)
    if kind == "sweep":
        document = sweep_scenario(
            target, traffic, sweep_size=options.sweep_size, seconds=options.seconds, out=report_path
        )
    else:
        built = goodput_scenario(
            target, traffic, options.slo, seconds=options.seconds, max_probes=options.goodput_probes, out=report_path
        )
        assert built is not None  # only asked for when the SLO has objectives
        document = built
    scenario_file = work / f"guidellm-{kind}.scenario.json"
    scenario_file.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    benchmarks = options.sweep_size if kind == "sweep" else options.goodput_probes
    bound = run_bound(benchmarks, options.seconds)
    log = work / f"guidellm-{kind}.log"
    try:
        run_scenario(guidellm, scenario_file, log, timeout=bound)
    except GuidellmStalled as exc:  # GuideLLM's intermittent stall: once more, then it is the row's error
        progress(f"{plan.bundle.name}: {exc}; running GuideLLM's {kind} once more")
        report_path.unlink(missing_ok=True)
        run_scenario(guidellm, scenario_file, log, timeout=bound)
    if not report_path.is_file():
        raise GuidellmFailed(f"GuideLLM wrote no report at {report_path}")
    report = read_report(report_path)
    return results.Measured(
        kind, plan.host, scenario, report.guidellm_version, report.points, report.goodput_search, ready, results.now()
    )


def bench(
    bundles: Sequence[BenchBundle],
    options: BenchOptions,
    guidellm: Guidellm,
    store: BundleStore,
    work: Path,
    progress: Progress,
    done: Callable[[BundleResult], None] | None = None,
) -> list[BundleResult]:
    """Measure every bundle in turn (one at a time: they share this host's cores or the instance)."""
    rows = []
    for index, bundle in enumerate(bundles):
        progress(f"[{index + 1}/{len(bundles)}] {bundle.name} ({bundle.path})")
        row = measure(bundle, options, guidellm, store, work / f"{index:02d}-{bundle.path.name[:16]}", progress)
        if row.error:
            progress(f"{bundle.name}: {row.error}")
        rows.append(row)
        if done is not None:
            done(row)
    return rows


__all__ = ["BenchBundle", "BenchOptions", "bench", "measure"]
