"""On-demand prices of the Neuron instances, to rank bundles by goodput per instance-hour.

Linux on-demand, US East (N. Virginia), USD per hour, as listed on the instance families' AWS pages
(https://aws.amazon.com/ec2/instance-types/inf2/ , https://aws.amazon.com/ec2/instance-types/trn1/);
the inf2.48xlarge price is the one the Hugging Face Neuron latency/throughput guide quotes ($12.98/h).
Prices change and differ by region and purchase option (reserved, savings plans, spot): ``--price
NAME=USD`` overrides any row, and an instance not listed here (trn2, trn3: capacity blocks) needs one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from neuronc.errors import InvalidInputError

PRICES_AS_OF = "2026-11-28"
PRICES_SOURCE = "aws.amazon.com/ec2/instance-types/inf2/ and /trn1/ (on-demand, us-east-1, Linux)"
ON_DEMAND_USD_PER_HOUR: Mapping[str, float] = {
    "inf2.xlarge": 0.76,
    "inf2.8xlarge": 1.97,
    "inf2.24xlarge": 6.49,
    "inf2.48xlarge": 12.98,
    "trn1.2xlarge": 1.34,
    "trn1.32xlarge": 21.50,
}


def parse_prices(values: Iterable[str], *, origin: str = "--price") -> dict[str, float]:
    """``NAME=USD`` pairs (``inf2.48xlarge=9.10``); InvalidInputError (exit 2) naming the bad one."""
    prices: dict[str, float] = {}
    for value in values:
        name, sep, number = value.partition("=")
        name = name.strip().removeprefix("ml.")
        try:
            usd = float(number)
        except ValueError:
            usd = -1.0
        if not sep or not name or usd <= 0:
            raise InvalidInputError(
                f"{origin} {value!r}: not INSTANCE=USD_PER_HOUR", hint="e.g. --price inf2.48xlarge=12.98"
            )
        prices[name] = usd
    return prices


def price_of(instance: str | None, overrides: Mapping[str, float] | None = None) -> float | None:
    """USD per hour of ``instance``: the override, else the table; None for the CPU host or an unlisted one."""
    if instance is None:
        return None
    name = instance.removeprefix("ml.")
    if overrides and name in overrides:
        return overrides[name]
    return ON_DEMAND_USD_PER_HOUR.get(name)


__all__ = ["ON_DEMAND_USD_PER_HOUR", "PRICES_AS_OF", "PRICES_SOURCE", "parse_prices", "price_of"]
