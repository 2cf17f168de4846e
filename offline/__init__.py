"""What runs without Kafka: offline evaluation of the learners on logs (:mod:`offline.evaluation`),
the builders of those logs from bundled data and simulations (:mod:`offline.logs`), and the
simulated environments both use, like the simulated application (:mod:`offline.environments`).

The event logic is not here: it is in :mod:`processors`, shared with the worker.
"""
