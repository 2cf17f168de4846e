"""Kafka wiring: topics, the worker app, the embedded broker, simulators, the CLI.

Streams only connect things and do I/O; the event logic lives in :mod:`banditflow.processors`.
"""
