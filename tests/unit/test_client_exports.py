"""``from banditflow import Client, ...`` gives the application's client, imported lazily:
``import banditflow.learners`` (pure algorithms) must not pull in aiokafka."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_the_client_is_imported_on_first_use_only() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys, banditflow, banditflow.learners, banditflow.schemas; "
         "assert 'aiokafka' not in sys.modules, 'aiokafka imported'; "
         "from banditflow import AsyncClient, Client, Decision, DecisionTimeout, Rejected; "
         "assert 'aiokafka' in sys.modules; "
         "print(Client.__module__, Rejected.__mro__[1].__name__)"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["banditflow.streams.client", "ValueError"]


def test_the_public_rejected_is_not_the_schemas_one() -> None:
    import banditflow
    from banditflow.schemas import Rejected as SchemaRejected

    assert banditflow.Rejected is not SchemaRejected
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        banditflow.Nothing  # noqa: B018
