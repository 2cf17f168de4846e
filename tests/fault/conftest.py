"""Fixtures of the fault suite: the integration suite's own (a real embedded Tansu broker,
real worker processes), loaded from tests/integration/conftest.py rather than copied, so
that both suites start brokers and workers the same way."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "integration" / "conftest.py"
_SPEC = importlib.util.spec_from_file_location("_integration_fixtures", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
_MODULE = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = _MODULE  # (its dataclasses look their module up)
_SPEC.loader.exec_module(_MODULE)

# Re-exported: pytest registers the fixture functions and hooks a conftest module holds
# (on an external broker, the fault tests skip and clean up as the integration tests do).
pytest_report_header = _MODULE.pytest_report_header
pytest_collection_modifyitems = _MODULE.pytest_collection_modifyitems
external_cleanup = _MODULE.external_cleanup
broker = _MODULE.broker
start_worker = _MODULE.start_worker
read_topic = _MODULE.read_topic
wait_until = _MODULE.wait_until
state_of = _MODULE.state_of
Worker = _MODULE.Worker
TopicReader = _MODULE.TopicReader
# (and the helpers the integration tests import as ``from conftest import ...``: which
# conftest module that name finds depends on the order pytest loaded them)
is_ready = _MODULE.is_ready
decisions_consumer = _MODULE.decisions_consumer
run_prefix = _MODULE.run_prefix
