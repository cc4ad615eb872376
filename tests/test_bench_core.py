"""SLO parsing, the pick, the Pareto front, the reason, the closest miss and the price table."""

from __future__ import annotations

import pytest

from neuronc.benchmark.pick import BASIS_GOODPUT, BASIS_PRICE, BundleResult, decide, pareto_front
from neuronc.benchmark.prices import ON_DEMAND_USD_PER_HOUR, PRICES_AS_OF, PRICES_SOURCE, parse_prices, price_of
from neuronc.benchmark.report import Point
from neuronc.benchmark.slo import parse_slo
from neuronc.errors import InvalidInputError, SloNotMetError


def point(rps: float, ttft_p99: float, itl_p99: float, *, errored: int = 0, strategy: str = "constant") -> Point:
    stats = {
        "time_to_first_token_ms": {"p99": ttft_p99, "p95": ttft_p99 * 0.9, "p50": ttft_p99 / 2, "mean": ttft_p99 / 2},
        "inter_token_latency_ms": {"p99": itl_p99, "p95": itl_p99 * 0.9, "p50": itl_p99 / 2, "mean": itl_p99 / 2},
        "time_per_output_token_ms": {"p99": itl_p99, "mean": itl_p99},
        "request_latency": {"p99": (ttft_p99 + 100 * itl_p99) / 1000, "mean": 0.0},
    }
    return Point(strategy, rps, rps, rps * 100, 50, errored, 0, stats)


def test_slo_parses_bounds_in_milliseconds() -> None:
    slo = parse_slo("ttft_p99<=2s, itl_p99<50ms,e2el_p95<=30s")
    assert [(b.metric, b.statistic, b.op, b.limit_ms) for b in slo.bounds] == [
        ("ttft", "p99", "<=", 2000.0),
        ("itl", "p99", "<", 50.0),
        ("e2e", "p95", "<=", 30000.0),
    ]
    assert slo.label() == "TTFT p99 ≤ 2 s, ITL p99 < 50 ms, E2E p95 ≤ 30 s"
    assert slo.goodput_objectives() == ({"ttft_ms": 2000.0, "tpot_ms": 50.0, "e2el_ms": 30000.0}, 0.99)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("ttfb_p99<=2s", "metric 'ttfb'"),
        ("ttft_p98<=2s", "statistic 'p98'"),
        ("ttft_p99<=2", "has no unit"),
        ("ttft_p99>=2s", "bound 1"),
        ("ttft_p99<=2s,itl_p99=5ms", "bound 2 ('itl_p99=5ms')"),
        ("ttft_p99<=2s,ttft_p99<=1s", "bounded twice"),
        ("", "empty"),
    ],
)
def test_a_bad_slo_is_exit_2_naming_the_bound_and_field(text: str, names: str) -> None:
    with pytest.raises(InvalidInputError, match=pytest.importorskip("re").escape(names)) as info:
        parse_slo(text)
    assert info.value.exit_code == 2


def test_means_only_have_no_goodput_objectives() -> None:
    assert parse_slo("ttft_mean<=1s,tpot_p99<=10ms").goodput_objectives() is None


# Three bundles of a matrix, as the guide describes them: batch 1 is fast and slow to saturate,
# batch 8 gives the most throughput at the highest latency.
B1 = BundleResult("batch 1", "k1", points=(point(0.5, 300, 20), point(1.0, 900, 22), point(1.4, 2500, 30)))
B4 = BundleResult("batch 4", "k4", points=(point(1.0, 600, 35), point(2.5, 1800, 45), point(3.0, 4000, 60)))
B8 = BundleResult("batch 8", "k8", points=(point(2.0, 1500, 70), point(3.1, 1900, 80), point(4.0, 6000, 90)))


def test_the_pick_is_the_highest_goodput_meeting_every_bound() -> None:
    decision = decide([B1, B4, B8], parse_slo("ttft_p99<=2s,itl_p99<=50ms"))
    assert decision.basis == BASIS_GOODPUT
    assert decision.pick is not None and decision.pick.result.name == "batch 4"
    assert decision.pick.goodput == 2.5
    assert [c.result.name for c in decision.ranked] == ["batch 4", "batch 1"]
    assert decision.reason.startswith("batch 4 meets TTFT p99 ≤ 2 s, ITL p99 ≤ 50 ms up to 2.5 req/s")
    assert "batch 8 does not (ITL p99 70 ms" in decision.reason


def test_the_pick_changes_with_the_slo() -> None:
    loose = decide([B1, B4, B8], parse_slo("ttft_p99<=2s,itl_p99<=100ms"))
    assert loose.pick is not None and loose.pick.result.name == "batch 8"
    strict = decide([B1, B4, B8], parse_slo("ttft_p99<=1s,itl_p99<=25ms"))
    assert strict.pick is not None and strict.pick.result.name == "batch 1"


def test_an_errored_point_never_meets_the_slo() -> None:
    broken = BundleResult("broken", "kb", points=(point(9.0, 10, 1, errored=3),))
    decision = decide([B1, broken], parse_slo("ttft_p99<=2s"))
    assert decision.pick is not None and decision.pick.result.name == "batch 1"


def test_no_bundle_meets_it_names_the_closest_and_by_how_much() -> None:
    decision = decide([B1, B4, B8], parse_slo("ttft_p99<=250ms"))
    assert decision.pick is None
    assert decision.closest is not None
    assert decision.closest.result.name == "batch 1"
    assert decision.closest.excess == pytest.approx(0.2)
    assert decision.reason == (
        "No bundle meets TTFT p99 ≤ 250 ms: batch 1 came closest, TTFT p99 300 ms at constant@0.5 req/s, 20% over the bound."
    )
    assert SloNotMetError(decision.reason).exit_code == 8


def test_with_prices_the_pick_is_goodput_per_instance_hour() -> None:
    small = BundleResult("tp2 on inf2.8xlarge", "ks", "inf2.8xlarge", 1.97, points=(point(1.0, 500, 20),))
    large = BundleResult("tp8 on inf2.48xlarge", "kl", "inf2.48xlarge", 12.98, points=(point(3.0, 500, 20),))
    decision = decide([small, large], parse_slo("ttft_p99<=2s"))
    assert decision.basis == BASIS_PRICE
    assert decision.pick is not None and decision.pick.result.name == "tp2 on inf2.8xlarge"
    assert decision.pick.per_dollar == pytest.approx(3600 / 1.97)
    assert "requests per dollar at $1.97/h" in decision.reason


def test_a_failed_bundle_is_its_row_and_the_others_are_picked() -> None:
    failed = BundleResult("batch 16", "k16", error="port 8000 is in use")
    decision = decide([B1, failed], parse_slo("ttft_p99<=2s"))
    assert decision.pick is not None and decision.pick.result.name == "batch 1"
    assert "batch 16 failed (port 8000 is in use)" in decision.reason


def test_the_pareto_front_keeps_points_nothing_beats_on_both_axes() -> None:
    bound = parse_slo("ttft_p99<=2s").bounds[0]
    front = [(name, p.requests_per_second) for name, p in pareto_front([B1, B4, B8], bound)]
    # batch 1 at 1.0 req/s (900 ms) is beaten by batch 4 at the same rate (600 ms); batch 4 at 3.0 req/s
    # (4 s) by batch 8 at 3.1 (1.9 s); batch 1 at 1.4 (2.5 s) by batch 8 at 2.0 (1.5 s).
    expected = [
        ("batch 1", 0.5),
        ("batch 4", 1.0),
        ("batch 8", 2.0),
        ("batch 4", 2.5),
        ("batch 8", 3.1),
        ("batch 8", 4.0),
    ]
    assert front == expected


def test_prices_have_a_date_and_source_and_can_be_overridden() -> None:
    assert PRICES_AS_OF and "aws.amazon.com" in PRICES_SOURCE
    assert price_of("inf2.48xlarge") == ON_DEMAND_USD_PER_HOUR["inf2.48xlarge"] == 12.98
    assert price_of("ml.inf2.48xlarge", parse_prices(["inf2.48xlarge=9.5"])) == 9.5
    assert price_of(None) is None
    assert price_of("trn2.48xlarge") is None
    with pytest.raises(InvalidInputError, match="--price 'inf2=abc'"):
        parse_prices(["inf2=abc"])
