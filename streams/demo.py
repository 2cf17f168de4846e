"""``banditflow demo``: the embedded broker, a worker and one simulated application per family.

Each family's application (its front door's ``application``:
:func:`banditflow.offline.environments.applications`) drives its learner and a baseline on the
same traffic; a live view shows them learning; the demo stops by itself, prints a summary read
from the worker's real ``/metrics`` endpoint, checks that convergence showed
(:func:`banditflow.streams.demo_report.checks`) and writes a report (HTML and PNG plots) under
``runs/``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import subprocess
import sys
import time
import urllib.error
from collections.abc import Sequence
from pathlib import Path

from banditflow.offline.environments import applications
from banditflow.streams.broker import EmbeddedBroker, dying_with_this_process, port_open
from banditflow.streams.cli import add_kafka_connection
from banditflow.streams.scrape import fetch, value
from banditflow.streams.simulate import (
    RECENT,
    SimulationReport,
    SimulationSettings,
    prepare,
    simulate,
)

# Contexts per family (each to the learner and to its baseline) and their rate per second,
# chosen so that every family shows convergence within about a minute on 2 shared cores:
# SPS needs about 8,000 rounds to come within 20 % of the oracle's set size (its threshold
# is conservative by design), the other three show it after 1,000-2,000.


def start_worker(
    bootstrap: str, web_port: int, partitions: int, prefix: str, log_path: Path,
    kafka_config: Path | None = None,
    extra_args: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """A worker process (the BANDITFLOW_KAFKA_* variables reach it through the
    environment, ``kafka_config`` as its --kafka-config) that dies with this one: a demo
    killed (a kill -9, a test's timeout) must not leave it running."""
    command = [
        sys.executable,
        "-m",
        "banditflow.streams.cli",
        "worker",
        "--bootstrap",
        bootstrap,
        *(["--kafka-config", str(kafka_config)] if kafka_config is not None else []),
        "--web-port",
        str(web_port),
        "--partitions",
        str(partitions),
        "--prefix",
        prefix,
        "--app-id",
        prefix,
        "--loglevel",
        "info",
        *extra_args,
    ]
    with open(log_path, "ab") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=dying_with_this_process())


def wait_until_ready(process: subprocess.Popen[bytes], web_port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the worker exited with status {process.returncode}")
        try:
            fetch(f"http://127.0.0.1:{web_port}/ready", timeout_s=1.0)
            return
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
    raise RuntimeError(f"the worker did not come up within {timeout_s:.0f}s")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def add_demo_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--family", action="append", choices=sorted(applications()),
                        help="run only this family (repeatable; default: all four)")
    parser.add_argument("--events", type=int, default=None,
                        help="contexts per family (default: per family, "
                        + ", ".join(f"{f} {a.events}" for f, a in applications().items()) + ")")
    parser.add_argument("--rate", type=float, default=None,
                        help="contexts per second per family (0: as fast as the worker "
                        "goes; default: per family, "
                        + ", ".join(f"{f} {a.rate:g}" for f, a in applications().items()) + ")")
    parser.add_argument("--delay-mean", type=float, default=0.2,
                        help="mean feedback delay in seconds, exponential (default: %(default)s)")
    parser.add_argument("--feedback-loss", type=float, default=0.0,
                        help="probability that feedback is never sent (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, default=19092, help="embedded broker port")
    add_kafka_connection(parser, bootstrap_help="run against this Kafka instead of an embedded "
                         "broker (so does --kafka-config; env BANDITFLOW_BOOTSTRAP)")
    parser.add_argument("--web-port", type=int, default=6066, help="worker /metrics port")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("runs/demo"),
                        help="logs and the report go here (default: %(default)s)")
    parser.add_argument("--publish", type=Path, default=None, metavar="DIR",
                        help="also copy the plots and the printed summary (demo.txt) into DIR "
                        "(the README's come from --publish docs/demo)")


def live_line(reports: list[SimulationReport], started: float) -> str:
    parts = []
    for report in reports:
        done = report.decided / max(report.expected, 1)
        learner, *baseline = report.tallies
        figure = f"regret {learner.regret:6.1f}"
        if baseline:
            figure += f" vs {baseline[0].regret:6.1f}"
        if learner.coverage is not None:
            figure = (f"cov {learner.coverage:.2f} size {learner.set_size:4.1f}"
                      f"/{report.oracle_set_size:.1f}")
        if report.budget is not None:
            price = "-" if learner.dual_price is None else f"{learner.dual_price:.2f}"
            figure += f" spent {learner.spent:4.0f}/{report.budget:.0f} dual {price}"
        parts.append(f"{report.family} {done:4.0%} {figure}")
    total = sum(r.decided for r in reports)
    elapsed = time.monotonic() - started
    return f"[{elapsed:4.0f}s {total / max(elapsed, 1e-9):5.0f} dec/s] " + " | ".join(parts)


async def run_applications(
    settings: list[SimulationSettings], prepared: list, tty: bool
) -> list[SimulationReport]:
    reports = [report for _, report in prepared]
    started = time.monotonic()

    async def view() -> None:
        while True:
            line = live_line(reports, started)
            print(f"\r{line}\x1b[K" if tty else line, end="" if tty else "\n", flush=True)
            await asyncio.sleep(1.0 if tty else 5.0)

    viewer = asyncio.create_task(view())
    try:
        return list(await asyncio.gather(*(simulate(s, None, p)
                                           for s, p in zip(settings, prepared, strict=True))))
    finally:
        viewer.cancel()
        if tty:
            print()


def wait_for_feedback(url: str, reports: list[SimulationReport], timeout_s: float = 30.0) -> str:
    """The /metrics text once the worker has applied the truth the applications sent."""
    deadline = time.monotonic() + timeout_s
    text = fetch(url)
    while time.monotonic() < deadline:
        behind = [t for r in reports for t in r.tallies
                  if (value(text, "banditflow_learner_decisions", learner_id=t.learner_id) or 0)
                  < t.decided]
        if not behind:
            time.sleep(1.0)  # the last truth records follow their decisions
            return fetch(url)
        time.sleep(0.5)
        text = fetch(url)
    return text


def run_demo(args: argparse.Namespace) -> int:
    from banditflow.streams.demo_report import checks, summary_rows, write_report

    families = args.family or list(applications())
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if port_open("127.0.0.1", args.web_port):
        print(f"port {args.web_port} is in use: pass --web-port", file=sys.stderr)
        return 2
    prefix = "demo"
    started = time.monotonic()
    settings = [
        SimulationSettings(
            prefix=prefix, family=family, baseline=True,
            events=args.events or applications()[family].events,
            rate=applications()[family].rate if args.rate is None else args.rate,
            delay_mean=args.delay_mean, feedback_loss=args.feedback_loss, seed=args.seed,
            timeout=300.0, workdir=out / "logs",
        )
        for family in families
    ]
    print(f"banditflow demo: {', '.join(families)}; a learner and a baseline each on the same "
          f"traffic; logs in {out}/")
    prepared = [prepare(s) for s in settings]
    for setting, (_, report) in zip(settings, prepared, strict=True):
        learner, baseline = report.tallies
        print(f"- {report.family}: {learner.algorithm} vs {baseline.algorithm}, "
              f"{report.events} contexts at {setting.rate:g}/s")
    external = args.bootstrap is not None or args.kafka_config is not None
    with contextlib.ExitStack() as running:
        if external:
            kafka = args.kafka
            print(f"- Kafka at {kafka.describe()}")
        else:
            broker = running.enter_context(
                EmbeddedBroker(port=args.port, log_path=out / "broker.log"))
            kafka = broker.connection
            print(f"- embedded broker (Tansu) on {broker.bootstrap}")
        worker = start_worker(kafka.bootstrap, args.web_port, args.partitions, prefix,
                              out / "worker.log", args.kafka_config)
        try:
            wait_until_ready(worker, args.web_port, timeout_s=90)
            metrics_url = f"http://127.0.0.1:{args.web_port}/metrics"
            print(f"- worker up, metrics at {metrics_url}")
            for s in settings:
                s.kafka = kafka
            reports = asyncio.run(run_applications(settings, prepared, sys.stdout.isatty()))
            text = wait_for_feedback(metrics_url, reports)
        finally:
            stop(worker)
    elapsed = time.monotonic() - started
    rows = summary_rows(text, reports)
    verdicts = checks(rows, reports)
    report_path = write_report(out, rows, verdicts, reports, elapsed)
    summary = summary_text(rows, verdicts, reports, elapsed)
    print(summary)
    if args.publish is not None:
        args.publish.mkdir(parents=True, exist_ok=True)
        for image in report_path.parent.glob("*.png"):
            shutil.copyfile(image, args.publish / image.name)
        (args.publish / "demo.txt").write_text(summary.lstrip("\n") + "\n")
    print(f"\nreport: {report_path}")
    complete = all(not r.timed_out and r.decided == r.expected for r in reports)
    return 0 if complete and all(v.passed for v in verdicts) else 1


def summary_text(rows: list[dict], verdicts: list, reports: list[SimulationReport],
                 elapsed: float) -> str:
    from banditflow.streams.demo_report import summary_table

    decided = sum(r.decided for r in reports)
    return "\n".join([
        "\nsummary (from the worker's /metrics; coverage and set size over the last "
        f"{RECENT} decisions)",
        summary_table(rows),
        "\nconvergence",
        *(f"  {'PASS' if v.passed else 'FAIL'}  {v.family:<10} {v.text}" for v in verdicts),
        f"\n{decided} decisions in {elapsed:.1f}s wall time (broker and worker start included)",
    ])
