"""Reading a worker's ``/metrics`` over HTTP (the demo's summary and the tests use it)."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def fetch(url: str, timeout_s: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return response.read().decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample as ``{(name, sorted label pairs): value}``."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    """The value of the one sample of ``name`` whose labels include ``labels``."""
    for (sample_name, pairs), sample_value in samples(text).items():
        if sample_name == name and labels.items() <= dict(pairs).items():
            return sample_value
    return None
