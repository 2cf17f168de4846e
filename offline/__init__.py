"""What runs without Kafka: offline evaluation of the learners on logs
(:mod:`banditflow.offline.evaluation`),
the builders of those logs from bundled data and simulations (:mod:`banditflow.offline.logs`), and
the
simulated environments both use, like the simulated application
(:mod:`banditflow.offline.environments`).

The event logic is not here: it is in :mod:`banditflow.processors`, shared with the worker.
"""
