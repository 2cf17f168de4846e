"""banditflow: online learning from partial, delayed feedback on Kafka event streams.

One import package. The repository keeps one folder per layer and pyproject.toml maps each
into this package: ``learners/`` is :mod:`banditflow.learners` (pure algorithms),
``schemas/`` :mod:`banditflow.schemas` (event models), ``processors/``
:mod:`banditflow.processors` (event logic), ``offline/`` :mod:`banditflow.offline` (what runs
without Kafka) and ``streams/`` :mod:`banditflow.streams` (Kafka wiring and the CLI).
Dependencies point one way: streams -> offline -> processors -> schemas -> learners.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("banditflow")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

# The application's client, imported on first use (PEP 562): it needs aiokafka, which
# `import banditflow.learners` (pure algorithms) must not pull in.
_CLIENT = ("AsyncClient", "Client", "Decision", "DecisionTimeout", "Rejected")
__all__ = ["__version__", *_CLIENT]


def __getattr__(name: str) -> object:
    if name in _CLIENT:
        from banditflow.streams import client

        return getattr(client, name)
    raise AttributeError(f"module 'banditflow' has no attribute {name!r}")
