"""``banditflow``: the command line of banditflow.

Commands: ``broker`` (embedded Kafka-protocol broker), ``worker`` (the worker),
``simulate`` (a simulated application), ``demo`` (all of them plus a live summary),
``schemas`` (write or check the published JSON Schemas), ``archive`` (topics into a JSONL
archive), ``replay`` (an archive back into topics), ``import-log`` (DSJSON / OBP logs into an
archive), ``ope`` (off-policy evaluation), ``warm-start`` (a learner trained on a log,
published), ``learners`` (list, show, create, delete learner configs), ``gateway`` (the HTTP
gateway) and ``kcat`` (Debian's kcat with a librdkafka that speaks to every broker
banditflow supports).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from banditflow.schemas import Limits


def add_kafka_connection(parser: argparse.ArgumentParser, bootstrap_help: str | None = None
                         ) -> None:
    """``--bootstrap`` and ``--kafka-config``: where the brokers are and how to talk to them
    (resolved in :func:`main` into ``args.kafka``)."""
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("BANDITFLOW_BOOTSTRAP"),
        help=bootstrap_help or "Kafka bootstrap servers (default: bootstrap.servers of "
        "--kafka-config, else 127.0.0.1:9092; env BANDITFLOW_BOOTSTRAP)",
    )
    parser.add_argument(
        "--kafka-config",
        type=Path,
        default=os.environ.get("BANDITFLOW_KAFKA_CONFIG"),
        metavar="FILE",
        help="Kafka client properties (librdkafka names: bootstrap.servers, security.protocol, "
        "ssl.ca.location, ssl.certificate.location, ssl.key.location, ssl.key.password, "
        "ssl.endpoint.identification.algorithm, sasl.mechanism, sasl.username, sasl.password, "
        "sasl.oauthbearer.*); BANDITFLOW_KAFKA_<KEY> variables (SSL_CA_LOCATION, ...) override "
        "it (env BANDITFLOW_KAFKA_CONFIG)",
    )


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def _common_kafka(parser: argparse.ArgumentParser) -> None:
    add_kafka_connection(parser)
    parser.add_argument(
        "--prefix", default="banditflow", help="topic name prefix (default: %(default)s)"
    )


def _learner_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--learner-version", type=int, default=None, metavar="N",
                        help="with --learner-id: the learner's version N (a reconfigured "
                        "learner starts a new one; decisions carry learner_version); default: "
                        "the latest, saying which versions it left out")


def _worker_options(parser: argparse.ArgumentParser) -> None:
    """The worker's options, their defaults read from :class:`WorkerSettings` (imported here:
    only ``banditflow worker`` and the full parser pay for its imports)."""
    from banditflow.streams.settings import EVENT_LOOPS, WorkerSettings

    defaults = WorkerSettings()
    parser.add_argument(
        "--partitions",
        type=int,
        default=defaults.partitions,
        help="partitions of every input topic (default: %(default)s)",
    )
    parser.add_argument(
        "--app-id",
        default=defaults.app_id,
        help="consumer group; also names the state log topic <app-id>.state: workers of "
        "one app id share the learners (default: %(default)s)",
    )
    parser.add_argument("--web-host", default=defaults.web_host, help="metrics bind host")
    parser.add_argument(
        "--web-port",
        type=int,
        default=defaults.web_port,
        help="port of /metrics, /ready and /healthz (default: %(default)s)",
    )
    parser.add_argument(
        "--web-config",
        type=Path,
        default=None,
        metavar="FILE",
        help="serve /metrics, /ready and /healthz over TLS and/or with basic auth: a "
        "Prometheus web.config YAML (tls_server_config: cert_file, key_file, "
        "client_auth_type, client_ca_file, min_version; basic_auth_users: bcrypt hashes)",
    )
    parser.add_argument(
        "--commit-interval-ms",
        type=float,
        default=defaults.commit_interval_s * 1000.0,
        help="how often state changes that published nothing (feedback, timers) are "
        "committed; a decision or a dead letter is committed at once, in the next commit "
        "that starts (one is in flight at a time); a crash redoes at most the events of "
        "one commit (default: %(default)s)",
    )
    parser.add_argument(
        "--fetch-wait-ms",
        type=int,
        default=None,
        help=f"how long a fetch may wait for records (default: {EMBEDDED_FETCH_WAIT_MS} on the "
        "embedded broker, which looks again at a fetch that found nothing only after half "
        "this long, then half of what is left, so it adds up to half of it to a decision's "
        f"latency; {defaults.fetch_wait_ms} elsewhere, where a fetch returns as soon as "
        "records arrive)",
    )
    parser.add_argument(
        "--feedback-fetch-interval-ms",
        type=non_negative_ms,
        default=defaults.feedback_fetch_interval_s * 1000.0,
        help="how long, at most, the feedback and truth partitions are paused once caught up "
        "(shorter where records come fast, none past 1,000 a second): no decision waits for "
        "them, and fetching them with every fetch of the contexts slows the contexts' fetches "
        "on the embedded broker; but while contexts flow, feedback waits up to that long; a "
        "partition with records unread is fetched every time, and a fetch that brings "
        "nothing ends the pause; 0 fetches them every time (default: %(default)s)",
    )
    parser.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default=defaults.event_loop,
        help="the worker's event loop: uvloop (asyncio's where it is not installed; about 6%% "
        "less CPU per decision) or asyncio's own (default: %(default)s)",
    )
    parser.add_argument(
        "--max-batch",
        type=int,
        default=defaults.max_batch_events,
        help="a commit starts early once this many events wait (default: %(default)s)",
    )
    parser.add_argument(
        "--session-timeout",
        type=float,
        default=None,
        help="consumer group session timeout in seconds: how soon a killed worker's partitions "
        f"move (default: {EMBEDDED_SESSION_TIMEOUT_S:g} on the embedded broker, "
        f"{defaults.session_timeout_s:g} elsewhere; Apache Kafka's minimum is 6)",
    )
    parser.add_argument(
        "--retention",
        type=float,
        default=defaults.retention_s,
        help="seconds of stream time a settled decision is kept to recognise a context or "
        "feedback sent again (default: %(default)s)",
    )
    limits = defaults.limits
    parser.add_argument("--max-event-bytes", type=int, default=limits.max_event_bytes,
                        help="larger records are dead-lettered (default: %(default)s)")
    parser.add_argument("--max-labels", type=int, default=limits.max_labels,
                        help="labels per conformal context (default: %(default)s)")
    parser.add_argument("--max-features", type=int, default=limits.max_features,
                        help="numbers in a context's features or graph (default: %(default)s)")
    parser.add_argument(
        "--max-exported-learners",
        type=int,
        default=defaults.max_exported_learners,
        help="learners exported individually to Prometheus (default: %(default)s)",
    )
    parser.add_argument(
        "--instance-id",
        default=defaults.instance_id,
        help="this worker's identity across restarts (default: host name and web port); a "
        "restarted worker removes its dead predecessor from the group at once",
    )
    parser.add_argument(
        "--on-state-loss",
        choices=("exit", "fresh"),
        default=defaults.on_state_loss,
        help="when the broker no longer holds the worker's state log (a broker restarted "
        "empty, topics deleted): exit with status 3, or start the lost partitions afresh with "
        "empty state (default: %(default)s)",
    )
    parser.add_argument(
        "--live-ope",
        action=argparse.BooleanOptionalAction,
        default=defaults.live_ope,
        help="evaluate the candidate policies named in learner configs (`candidates`) on the "
        "live decisions and feedback, exported as banditflow_ope_* gauges; --no-live-ope "
        "ignores them and keeps their estimates as they were (default: on; a learner without "
        "candidates costs nothing either way)",
    )
    parser.add_argument(
        "--loglevel",
        default="warning",
        type=str.lower,
        choices=LOG_LEVELS,
        help="the worker's own log level; the line saying it is ready (version, bootstrap, "
        "partitions, metrics URL) and one line per rebalance show unless it is error or "
        "critical (default: %(default)s)",
    )
    parser.add_argument(
        "--client-loglevel",
        default="warning",
        type=str.lower,
        choices=LOG_LEVELS,
        help="log level of the Kafka client libraries (aiokafka, kafka-python), kept apart "
        "so that --loglevel info or debug is not flooded by them (default: %(default)s)",
    )


def non_negative_ms(text: str) -> float:
    """An argument in milliseconds: a finite number, 0 or more."""
    try:
        ms = float(text)
    except ValueError:
        ms = math.nan
    if not math.isfinite(ms) or ms < 0:
        raise argparse.ArgumentTypeError(f"expected milliseconds, 0 or more: {text!r}")
    return ms


# The worker's input fetch wait per broker. The embedded broker (Tansu) looks again at a
# fetch that found nothing only after half its wait, then half of what is left (its source,
# and the wire: 400-ms fetches answered after 202, 302 or 401 ms, 2026-11-29): the wait adds
# up to half itself to a decision's latency, and a fetch lists every batch of its partition,
# so too short a wait starves. A no-op consumer re-publishing each record at 500/s (issue 26):
# p50/p99 20.5/71.8 ms with a 20 ms wait, 16.5/52.9 with 10, 26.6/135.8 with 5, and with 2 a
# third of the records not back after seconds. The worker at 500/s (tests/benchmarks/
# bench_latency.py, 2 rounds each on a loaded machine): p50/p99 45/250 ms with 10, 61/366
# with 20, 39/663 with 5; idle CPU 0.08 / 0.05 / 0.09 of a core. Apache Kafka answers a fetch
# as soon as records arrive: the wait costs no latency, it only bounds how often an idle
# consumer asks (Kafka's default, 500 ms). A partition the embedded broker cannot list in
# time raises the wait by itself (streams/fetch_wait.py).
EMBEDDED_FETCH_WAIT_MS = 10
# The embedded broker's session timeout: a killed worker's partitions move in seconds (Apache
# Kafka refuses less than 6 s; the worker's default, WorkerSettings, is for it).
EMBEDDED_SESSION_TIMEOUT_S = 2.0


def worker_settings(args: argparse.Namespace):  # -> WorkerSettings
    from banditflow.streams.broker import is_tansu
    from banditflow.streams.settings import WorkerSettings
    from banditflow.streams.webconfig import WebConfig

    defaults = WorkerSettings()
    session, fetch_wait = args.session_timeout, args.fetch_wait_ms
    if session is None or fetch_wait is None:
        tansu = is_tansu(args.kafka)
        session = session if session is not None else (
            EMBEDDED_SESSION_TIMEOUT_S if tansu else defaults.session_timeout_s
        )
        fetch_wait = fetch_wait if fetch_wait is not None else (
            EMBEDDED_FETCH_WAIT_MS if tansu else defaults.fetch_wait_ms
        )
    return WorkerSettings(
        kafka=args.kafka,
        app_id=args.app_id,
        prefix=args.prefix,
        partitions=args.partitions,
        web_host=args.web_host,
        web_port=args.web_port,
        commit_interval_s=args.commit_interval_ms / 1000.0,
        max_batch_events=args.max_batch,
        fetch_wait_ms=fetch_wait,
        feedback_fetch_interval_s=args.feedback_fetch_interval_ms / 1000.0,
        event_loop=args.event_loop,
        retention_s=args.retention,
        max_exported_learners=args.max_exported_learners,
        session_timeout_s=session,
        instance_id=args.instance_id,
        on_state_loss=args.on_state_loss,
        live_ope=args.live_ope,
        web_config=WebConfig.load(args.web_config) if args.web_config else None,
        limits=Limits(args.max_event_bytes, args.max_labels, args.max_features),
    )


def cmd_broker(args: argparse.Namespace) -> int:
    from banditflow.streams.broker import EmbeddedBroker

    with EmbeddedBroker(args.host, args.port) as broker:
        print(
            f"embedded Kafka-protocol broker (Tansu, memory storage) on {broker.bootstrap}; "
            "Ctrl-C stops it",
            flush=True,
        )
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            while broker.process is not None and broker.process.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    import logging

    from banditflow.streams.broker import wait_for_broker
    from banditflow.streams.logfilters import RejoinNote, RepeatFilter
    from banditflow.streams.topics import Topics, ensure_topics
    from banditflow.streams.worker import run_worker

    level = logging.getLevelName(args.loglevel.upper())
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The ready and rebalance lines show at the default level, silenced only by error/critical.
    logging.getLogger("banditflow.worker.lifecycle").setLevel(
        logging.INFO if level <= logging.WARNING else level)
    for client in ("aiokafka", "kafka"):
        logging.getLogger(client).setLevel(args.client_loglevel.upper())
    for handler in logging.getLogger().handlers:
        handler.addFilter(RepeatFilter())
        handler.addFilter(RejoinNote())
    wait_for_broker(args.kafka)
    settings = worker_settings(args)
    ensure_topics(settings.kafka, Topics(settings.prefix), settings.partitions, settings.app_id)
    return run_worker(settings)


def cmd_schemas(args: argparse.Namespace) -> int:
    from banditflow.schemas.published import check_published, write_published

    if args.write:
        for path in write_published():
            print(f"wrote {path}")
        return 0
    drift = check_published()
    for line in drift:
        print(line, file=sys.stderr)
    return 1 if drift else 0


def run_kcat(kcat_args: list[str]) -> int:
    from banditflow.streams.connection import KafkaConfigError, KafkaConnection
    from banditflow.streams.kcat import KcatError, kcat_command, pass_config, split_kafka_config

    try:
        config_file, kcat_args = split_kafka_config(kcat_args)
        config_file = config_file or os.environ.get("BANDITFLOW_KAFKA_CONFIG")
        command, env = kcat_command(kcat_args)
        if config_file or any(k.startswith("BANDITFLOW_KAFKA_") for k in os.environ):
            command = pass_config(command, KafkaConnection.resolve(
                os.environ.get("BANDITFLOW_BOOTSTRAP"), config_file, os.environ))
    except (KafkaConfigError, KcatError) as exc:  # the setup, not a bug: say what to do
        raise SystemExit(f"banditflow kcat: {exc}") from None
    os.execvpe(command[0], command, env)


def cmd_simulate(args: argparse.Namespace) -> int:
    from banditflow.streams.simulate import SimulationSettings, run_simulation

    try:
        settings = SimulationSettings.from_args(args)
    except ValueError as exc:
        raise SystemExit(f"banditflow simulate: {exc}") from None
    report = run_simulation(settings)
    print(report.render())
    return 0 if not report.timed_out and report.decided == report.expected else 1


def cmd_evaluate(args: argparse.Namespace) -> int:
    from banditflow.offline.evaluation import run_evaluate
    from banditflow.offline.evaluation.replay import LogError, ReplayError

    try:
        return run_evaluate(args)
    except (LogError, ReplayError) as exc:  # the user's log or parameters, not a bug
        raise SystemExit(f"banditflow evaluate: {exc}") from None


def cmd_make_log(args: argparse.Namespace) -> int:
    from banditflow.offline.logs import builders

    known = builders()
    if args.task not in known:
        raise SystemExit(f"unknown log {args.task!r}; known: {', '.join(sorted(known))}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    print(f"{args.out}: {known[args.task](args.out, args.rounds, args.seed)}")
    return 0


def cmd_archive(args: argparse.Namespace) -> int:
    from banditflow.offline.archive import (
        ArchiveError,
        read_archive,
        select_version,
        write_archive,
    )
    from banditflow.streams.archive import ArchiveSettings, run_archive
    from banditflow.streams.broker import wait_for_broker
    from banditflow.streams.topics import TopicError

    if args.learner_version is not None and args.learner_id is None:
        raise SystemExit("banditflow archive: --learner-version needs --learner-id")
    wait_for_broker(args.kafka)
    settings = ArchiveSettings(args.kafka, args.prefix, args.out, args.from_beginning,
                               args.until_idle)
    tty = sys.stderr.isatty()
    try:
        count = run_archive(settings, (lambda n: print(f"\r{n:,} records", end="",
                                                       file=sys.stderr)) if tty else None)
        if tty:
            print(file=sys.stderr)
        if args.learner_id is not None:  # the whole prefix was read: keep one learner version
            header, records = read_archive(args.out)
            chosen = select_version(records, args.learner_id, args.learner_version)
            count = write_archive(args.out, chosen.records, header.source, header.prefix)
            print(chosen.note(), file=sys.stderr)
    except (OSError, TopicError, ArchiveError) as exc:
        raise SystemExit(f"banditflow archive: {exc}") from None
    print(f"{args.out}: {count:,} records", file=sys.stderr)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from banditflow.offline.archive import ArchiveError
    from banditflow.offline.faithful import FaithfulError
    from banditflow.streams.broker import wait_for_broker
    from banditflow.streams.replay import ReplaySettings, run_replay
    from banditflow.streams.topics import TopicError, Topics, ensure_topics

    try:
        settings = ReplaySettings(args.kafka, args.prefix, args.log, args.speed, args.start,
                                  args.end, args.learner_id, args.faithful,
                                  args.decision_wait, args.learner_version,
                                  args.dead_letter_wait)
        wait_for_broker(args.kafka)
        ensure_topics(args.kafka, Topics(args.prefix), args.partitions)
        tty = sys.stderr.isatty()
        summary = run_replay(settings, (lambda done, total: print(
            f"\r{done:,} / {total:,} records ({100 * done // max(total, 1)} %)", end="",
            file=sys.stderr)) if tty else None)
    except (OSError, ArchiveError, TopicError, FaithfulError) as exc:
        raise SystemExit(f"banditflow replay: {exc}") from None
    print(("\n" if tty else "") + summary.render(), file=sys.stderr)
    return 0 if summary.faithful is None or summary.faithful.ok else 1


def cmd_warm_start(args: argparse.Namespace) -> int:
    from kafka import KafkaProducer

    from banditflow.offline.archive import ArchiveError, joined_rounds, read_archive
    from banditflow.offline.formats import import_log
    from banditflow.offline.warm_start import warm_config
    from banditflow.schemas import LearnerConfig
    from banditflow.streams.broker import wait_for_broker
    from banditflow.streams.topics import TopicError, Topics, ensure_topics

    try:
        config = LearnerConfig.model_validate_json(args.config.read_bytes())
        if args.format == "archive":
            records = read_archive(args.log)[1]
        else:
            records = import_log(args.log, args.format, dims=args.dims)[0]
        rounds = joined_rounds(records)
        sources = sorted({r.learner_id for r in rounds})
        if args.from_learner is not None:
            rounds = [r for r in rounds if r.learner_id == args.from_learner]
        elif len(sources) > 1:
            raise SystemExit(f"banditflow warm-start: the log holds {len(sources)} learners "
                             f"({', '.join(sources)}): choose one with --from-learner")
        warmed, trained = warm_config(config, rounds)
        value = warmed.model_dump_json().encode()
        if len(value) > args.max_bytes:
            raise SystemExit(
                f"banditflow warm-start: the config with its oracle takes {len(value):,} bytes, "
                f"more than --max-bytes {args.max_bytes:,} (the worker's --max-event-bytes and "
                "the broker's message limit must allow it)")
        wait_for_broker(args.kafka)
        ensure_topics(args.kafka, Topics(args.prefix), args.partitions)
        producer = KafkaProducer(**args.kafka.kafka_python_kwargs(), acks="all",
                                 max_request_size=max(args.max_bytes, 1_048_576))
        producer.send(Topics(args.prefix).learners, key=warmed.learner_id.encode(), value=value)
        producer.flush()
        producer.close()
    except (OSError, ArchiveError, TopicError, ValueError) as exc:
        raise SystemExit(f"banditflow warm-start: {exc}") from None
    print(f"published {warmed.family}/{warmed.algorithm} learner {warmed.learner_id!r} to "
          f"{Topics(args.prefix).learners}, its oracle trained on {trained:,} logged rounds "
          f"({len(value):,} bytes)", file=sys.stderr)
    return 0


def cmd_import_log(args: argparse.Namespace) -> int:
    from banditflow.offline.archive import write_archive
    from banditflow.offline.formats import import_log

    try:
        records, report = import_log(args.log, args.format, args.learner_id, args.dims)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"banditflow import-log: {exc}") from None
    write_archive(args.out, records, source=args.format)
    print(f"{args.out}: {report.render()}", file=sys.stderr)
    return 0


def cmd_ope(args: argparse.Namespace) -> int:
    import json

    from banditflow.offline.archive import (
        ArchiveError,
        joined_rounds,
        read_archive,
        select_version,
    )
    from banditflow.offline.formats import import_log
    from banditflow.offline.ope.evaluation import evaluate
    from banditflow.offline.ope.policies import PolicyError, parse_policy
    from banditflow.offline.ope.reward_model import FeatureError

    try:
        policies = [parse_policy(spec) for spec in args.policy]
        if args.format == "archive":
            records = read_archive(args.log)[1]
        else:
            records, report = import_log(args.log, args.format, dims=args.dims)
            print(report.render(), file=sys.stderr)
        learners = sorted({r.learner_id for r in joined_rounds(records)})
        learner_id = args.learner_id
        if learner_id is None and len(learners) > 1:
            raise SystemExit(f"banditflow ope: the log holds {len(learners)} learners "
                             f"({', '.join(learners)}): choose one with --learner-id")
        if learner_id is None and args.learner_version is not None:
            raise SystemExit("banditflow ope: --learner-version needs --learner-id")
        if learner_id is None and learners:
            learner_id = learners[0]
        if learner_id is not None:
            chosen = select_version(records, learner_id, args.learner_version)
            records = chosen.records
            if len(chosen.decisions) > 1 or args.learner_version is not None:
                print(chosen.note(), file=sys.stderr)
        result = evaluate(joined_rounds(records), policies, args.min_propensity, args.folds,
                          args.seed)
    except (OSError, ArchiveError, PolicyError, FeatureError, ValueError) as exc:
        raise SystemExit(f"banditflow ope: {exc}") from None
    print(json.dumps(result.as_json()) if args.json else result.table())
    if args.out is not None:
        for path in result.write(args.out):
            print(f"wrote {path}", file=sys.stderr)
    return 0


def cmd_learners(args: argparse.Namespace) -> int:
    import json

    from aiokafka.errors import KafkaError

    from banditflow.streams.client import Client, Rejected

    if args.action != "list" and args.target is None:
        print(f"banditflow learners {args.action}: which learner? "
              f"({'a JSON config file' if args.action == 'create' else 'its id'})",
              file=sys.stderr)
        return 2
    config = None
    if args.action == "create":
        try:
            config = json.loads(Path(args.target).read_bytes())
        except (OSError, ValueError) as exc:
            print(f"banditflow learners create: {args.target}: {exc}", file=sys.stderr)
            return 2
    try:
        with Client(args.kafka, prefix=args.prefix) as bf:
            if args.action == "list":
                for learner in bf.learners.list():
                    print(f"{learner.learner_id}\t{learner.family}\t{learner.algorithm}")
            elif args.action == "show":
                learner = bf.learners.get(args.target)
                if learner is None:
                    print(f"banditflow learners show: no learner {args.target!r}",
                          file=sys.stderr)
                    return 1
                print(learner.model_dump_json(indent=2))
            elif args.action == "create":
                created = bf.learners.create(config)
                print(f"created {created.family}/{created.algorithm} learner "
                      f"{created.learner_id!r}", file=sys.stderr)
            else:
                bf.learners.delete(args.target)
                print(f"deleted learner {args.target!r}", file=sys.stderr)
    except Rejected as exc:
        print(f"banditflow learners {args.action}: {exc}", file=sys.stderr)
        return 2 if exc.reason != "unknown_learner" else 1
    except (RuntimeError, KafkaError) as exc:  # no broker, or no topics of this prefix
        print(f"banditflow learners {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_gateway(args: argparse.Namespace) -> int:
    try:
        from banditflow.streams.gateway import GatewayError, GatewaySettings, run_gateway
    except ModuleNotFoundError as exc:
        print(f"banditflow gateway needs {exc.name}, which the gateway extra installs: "
              "pip install 'banditflow[gateway]'", file=sys.stderr)
        return 2

    try:
        return run_gateway(GatewaySettings(
            args.kafka, args.prefix, args.host, args.port,
            args.api_keys, args.tls_cert, args.tls_key, args.timeout, args.metrics_host,
            args.metrics_port, Limits(args.max_event_bytes, args.max_labels, args.max_features),
        ))
    except (OSError, GatewayError) as exc:
        print(f"banditflow gateway: {exc}", file=sys.stderr)
        return 2


def cmd_demo(args: argparse.Namespace) -> int:
    from banditflow.streams.demo import run_demo

    return run_demo(args)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line; with ``command``, the options of the other commands that cost
    imports (the learners, numba, matplotlib) are left out, so that ``banditflow worker``
    starts in about a second."""

    def wanted(name: str) -> bool:
        return command is None or command == name

    parser = argparse.ArgumentParser(
        prog="banditflow",
        description="Online learning from partial, delayed feedback on Kafka event streams.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("broker", help="run the embedded Kafka-protocol broker (Tansu)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9092)
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser("worker", help="run a worker (learner state, decisions, metrics)")
    _common_kafka(p)
    if wanted("worker"):
        _worker_options(p)
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("simulate", help="play a simulated application against running workers")
    _common_kafka(p)
    if wanted("simulate"):
        from banditflow.streams.simulate import add_simulation_options

        add_simulation_options(p, family_default=None)
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser(
        "demo",
        help="broker + worker + a simulated application per family (learner vs baseline), "
        "live view; stops by itself, prints a summary and writes a report",
    )
    if wanted("demo"):
        from banditflow.streams.demo import add_demo_options

        add_demo_options(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("evaluate", help="replay a log through the processors offline and "
                                        "report (summary.json, trajectory.jsonl, plots)")
    if wanted("evaluate"):
        from banditflow.offline.evaluation import add_evaluate_options

        add_evaluate_options(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("make-log", help="build an evaluation log from bundled data or a "
                                        "simulation (no downloads)")
    p.add_argument("task", help="which log (an unknown name lists them)")
    p.add_argument("--rounds", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=cmd_make_log)

    p = sub.add_parser("archive", help="copy the learners, contexts, decisions, feedback, "
                                       "truth and deadletter topics into one JSONL archive")
    _common_kafka(p)
    p.add_argument("--out", type=Path, required=True, help="the archive file to write")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the topics' beginning (default: at their end)")
    p.add_argument("--until-idle", type=float, default=None, metavar="S",
                   help="stop once no record came for S seconds (default: run until Ctrl-C)")
    p.add_argument("--learner-id", default=None,
                   help="keep only this learner's records, of one version (below)")
    _learner_version(p)
    p.set_defaults(func=cmd_archive)

    p = sub.add_parser("replay", help="produce an archive's learners, contexts, feedback and "
                                      "truth records into the topics of a prefix")
    p.add_argument("log", type=Path, help="an archive (banditflow archive / import-log)")
    _common_kafka(p)
    p.add_argument("--partitions", type=int, default=4,
                   help="partitions of topics the replay creates; existing ones must have "
                        "as many (default: %(default)s)")
    p.add_argument("--speed", type=float, default=0.0,
                   help="0: as fast as possible; s > 0: the recorded pace, s times faster "
                        "(default: %(default)s)")
    p.add_argument("--start", type=float, default=None, metavar="TS",
                   help="skip records stamped before TS (seconds since the epoch)")
    p.add_argument("--end", type=float, default=None, metavar="TS",
                   help="skip records stamped after TS (seconds since the epoch)")
    p.add_argument("--learner-id", default=None,
                   help="replay only this learner's records, of one version (below)")
    _learner_version(p)
    p.add_argument("--dead-letter-wait", type=float, default=3.0, metavar="S",
                   help="then report, per topic and reason, the replayed records the workers "
                        "dead-lettered, read from the dead-letter topic until S seconds pass "
                        "without one or a decision of a replayed context; 0: do not wait "
                        "(default: %(default)s)")
    p.add_argument("--faithful", action="store_true",
                   help="keep the live order of each learner's contexts and feedback (the "
                        "workers of the prefix must be running; no --start, --end or "
                        "--speed), then check that every decision came out as it did live; "
                        "exit status 1 if one did not")
    p.add_argument("--decision-wait", type=float, default=60.0, metavar="S",
                   help="with --faithful: give up when no decision came for S seconds "
                        "(default: %(default)s)")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("warm-start", help="train a graph_cb learner's oracle on a log and "
                                          "publish its config, so that the worker starts "
                                          "from it")
    p.add_argument("log", type=Path, help="an archive, or a DSJSON / OBP log (--format)")
    p.add_argument("--config", type=Path, required=True,
                   help="the learner config (JSON, as on the learners topic, with learner_id)")
    _common_kafka(p)
    p.add_argument("--format", choices=("archive", "dsjson", "obp"), default="archive",
                   help="(default: %(default)s)")
    p.add_argument("--from-learner", default=None,
                   help="the logged learner to train on when the log holds several")
    p.add_argument("--partitions", type=int, default=4,
                   help="partitions of topics created here (default: %(default)s)")
    p.add_argument("--max-bytes", type=int, default=1_000_000,
                   help="refuse a config larger than this (default: %(default)s, the worker's "
                        "default --max-event-bytes)")
    p.add_argument("--dims", type=int, default=None,
                   help="dsjson: hashed slots of the shared and of each candidate's features "
                        "(default: 16)")
    p.set_defaults(func=cmd_warm_start)

    p = sub.add_parser("import-log", help="turn a Vowpal Wabbit DSJSON or an Open Bandit "
                                          "Pipeline log into an archive")
    p.add_argument("log", type=Path)
    p.add_argument("--format", choices=("dsjson", "obp"), required=True,
                   help="dsjson: one decision-service JSON event a line; obp: OBP's bandit "
                        "feedback dictionary saved with numpy.savez (.npz) or as JSON")
    p.add_argument("--out", type=Path, required=True, help="the archive file to write")
    p.add_argument("--learner-id", default="imported",
                   help="the learner id the events are filed under (default: %(default)s)")
    p.add_argument("--dims", type=int, default=None,
                   help="dsjson: hashed slots of the shared and of each candidate's features "
                        "(default: 16)")
    p.set_defaults(func=cmd_import_log)

    p = sub.add_parser("ope", help="off-policy evaluation of target policies on a log: IPS, "
                                   "SNIPS and DR with 95%% intervals")
    p.add_argument("log", type=Path, help="an archive, or a DSJSON / OBP log (--format)")
    p.add_argument("--format", choices=("archive", "dsjson", "obp"), default="archive",
                   help="(default: %(default)s)")
    p.add_argument("--policy", action="append", required=True, metavar="SPEC",
                   help="logged, uniform, constant:J (0-based action index) or the path of a "
                        "learner config file (JSON: family, algorithm, params, seed; evaluated "
                        "as it learns, explore_eval-style); repeatable")
    p.add_argument("--json", action="store_true",
                   help='print {"rounds", "policies": [{"policy", "ips", "snips", "dr", "ess"}]}')
    p.add_argument("--out", type=Path, default=None,
                   help="write ope.json (with diagnostics) and ope.png into this directory")
    p.add_argument("--learner-id", default=None,
                   help="the learner to evaluate when the log holds several")
    _learner_version(p)
    p.add_argument("--min-propensity", type=float, default=1e-3,
                   help="propensities below this are raised to it in the weights "
                        "(clipping; 0 for none; default: %(default)s)")
    p.add_argument("--folds", type=int, default=5,
                   help="cross-fitting folds of DR's reward model (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the folds (default: 0)")
    p.add_argument("--dims", type=int, default=None,
                   help="dsjson: hashed slots of the shared and of each candidate's features "
                        "(default: 16)")
    p.set_defaults(func=cmd_ope)

    p = sub.add_parser("learners", help="list, show, create or delete learner configs",
                       description="Learner configs on the compacted learners topic. create "
                       "checks the config as the worker would and refuses an invalid one with "
                       "the reason (exit status 2), or an existing learner id.")
    p.add_argument("action", choices=("list", "show", "create", "delete"))
    p.add_argument("target", nargs="?", metavar="ID|FILE",
                   help="show/delete: the learner id; create: a JSON config file")
    _common_kafka(p)
    p.set_defaults(func=cmd_learners)

    p = sub.add_parser("gateway", help="serve decisions, feedback, truth and learner configs "
                                       "over HTTP (needs the gateway extra)",
                       description="The HTTP gateway: POST /v1/learners/{id}/decisions, "
                       "/feedback, /truth; GET /v1/learners, GET|PUT|DELETE "
                       "/v1/learners/{id}; GET /openapi.json; open: /healthz, /ready.")
    _common_kafka(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="bind address; anything but loopback needs --api-keys "
                        "(default: %(default)s)")
    p.add_argument("--port", type=int, default=8080, help="(default: %(default)s)")
    p.add_argument("--api-keys", type=Path, default=None, metavar="FILE",
                   help="one ROLE:TOKEN a line, ROLE decide (decisions, feedback, truth, "
                        "reading configs) or admin (everything); clients send "
                        "Authorization: Bearer TOKEN")
    p.add_argument("--tls-cert", type=Path, default=None, help="serve HTTPS with this "
                                                               "certificate (PEM)")
    p.add_argument("--tls-key", type=Path, default=None, help="... and this key (PEM)")
    p.add_argument("--timeout", type=float, default=10.0,
                   help="seconds a decision request waits before 504 (default: %(default)s; "
                        "a request's ?timeout= overrides it)")
    p.add_argument("--metrics-host", default="127.0.0.1",
                   help="bind address of /metrics (default: %(default)s)")
    p.add_argument("--metrics-port", type=int, default=6067,
                   help="port of the gateway's Prometheus /metrics (default: %(default)s)")
    p.add_argument("--max-event-bytes", type=int, default=Limits.max_event_bytes,
                   help="the worker's limits, checked before producing (default: %(default)s)")
    p.add_argument("--max-labels", type=int, default=Limits.max_labels,
                   help="(default: %(default)s)")
    p.add_argument("--max-features", type=int, default=Limits.max_features,
                   help="(default: %(default)s)")
    p.set_defaults(func=cmd_gateway)

    p = sub.add_parser("schemas", help="check (default) or --write the published JSON Schemas")
    p.add_argument("--write", action="store_true")
    p.set_defaults(func=cmd_schemas)

    # Handled in main() before parsing, so kcat's own flags pass through; listed for --help.
    sub.add_parser(
        "kcat",
        help="run kcat (all arguments go to it but --kafka-config FILE, whose settings it "
        "gets, as the BANDITFLOW_KAFKA_* ones) with a librdkafka that speaks to Tansu and, "
        "for producers, the murmur2 partitioner",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["kcat"]:
        return run_kcat(argv[1:])
    if argv[:1] == ["worker"]:
        # Before anything slow (the worker's imports: a second or more on a busy machine,
        # waiting for the broker, creating topics): a SIGTERM meanwhile stops the worker
        # cleanly, as it owns nothing yet, not with -15. The worker installs its own
        # handling once it runs.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    from banditflow.streams.broker import BrokerError
    from banditflow.streams.connection import KafkaConfigError, KafkaConnection
    from banditflow.streams.webconfig import WebConfigError

    try:
        if hasattr(args, "kafka_config"):
            args.kafka = KafkaConnection.resolve(args.bootstrap, args.kafka_config, os.environ)
        return int(args.func(args) or 0)
    except (KafkaConfigError, BrokerError, WebConfigError) as exc:
        # One line naming the cause: a configuration or a broker the command cannot use.
        raise SystemExit(f"banditflow {args.command}: {exc}") from None


if __name__ == "__main__":
    sys.exit(main())
