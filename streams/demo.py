"""``banditflow demo``: the embedded broker, a worker, a simulated application and metrics.

Everything runs locally; the demo stops by itself after ``--events`` contexts and prints a
summary read from the worker's real ``/metrics`` endpoint.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

from offline.environments import GaussianScores
from streams.broker import EmbeddedBroker, port_open
from streams.scrape import fetch, samples, value
from streams.simulate import SimulationReport, SimulationSettings, run_simulation


def start_worker(
    bootstrap: str, web_port: int, partitions: int, prefix: str, log_path: Path
) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "streams.cli",
        "worker",
        "--bootstrap",
        bootstrap,
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
    ]
    with open(log_path, "ab") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)


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


def progress_line(report: SimulationReport, events: int) -> None:
    coverage = report.covered / report.decided if report.decided else 0.0
    size = report.set_size_sum / report.decided if report.decided else 0.0
    threshold = "-inf" if report.last_threshold is None else f"{report.last_threshold:.3f}"
    line = (
        f"  decided {report.decided:>6}/{events} | {report.decisions_per_s:6.0f}/s | "
        f"coverage {coverage:.3f} | set size {size:5.2f} | threshold {threshold:>7}"
    )
    if sys.stdout.isatty():
        print(f"\r{line}", end="", flush=True)
    else:
        print(line, flush=True)


def run_demo(args: argparse.Namespace) -> int:
    args.logs.mkdir(parents=True, exist_ok=True)
    if port_open("127.0.0.1", args.web_port):
        print(f"port {args.web_port} is in use: pass --web-port", file=sys.stderr)
        return 2
    prefix = "demo"
    print(
        f"banditflow demo: {args.events} events, learner {args.learner_id!r} (conformal/sps, "
        f"target coverage {args.alpha}); logs in {args.logs}/"
    )
    started = time.monotonic()
    with EmbeddedBroker(port=args.port, log_path=args.logs / "broker.log") as broker:
        print(f"- embedded broker (Tansu) on {broker.bootstrap}")
        worker = start_worker(
            broker.bootstrap, args.web_port, args.partitions, prefix, args.logs / "worker.log"
        )
        try:
            wait_until_ready(worker, args.web_port, timeout_s=90)
            metrics_url = f"http://127.0.0.1:{args.web_port}/metrics"
            print(f"- worker up, metrics at {metrics_url}")
            settings = SimulationSettings.from_args(args)
            settings.bootstrap, settings.prefix = broker.bootstrap, prefix
            report = run_simulation(settings, lambda r: progress_line(r, args.events))
            if sys.stdout.isatty():
                print()
            text = wait_for_feedback(metrics_url, args.learner_id, report.feedback_sent)
        finally:
            stop(worker)
    print_summary(text, args, report, time.monotonic() - started)
    return 0 if not report.timed_out and report.decided == args.events else 1


def wait_for_feedback(url: str, learner_id: str, expected: int, timeout_s: float = 30.0) -> str:
    """The /metrics text once the worker has applied the feedback the simulator sent."""
    deadline = time.monotonic() + timeout_s
    text = fetch(url)
    while time.monotonic() < deadline:
        applied = value(text, "banditflow_learner_feedback", learner_id=learner_id) or 0.0
        if applied >= expected:
            break
        time.sleep(0.5)
        text = fetch(url)
    return text


def print_summary(
    text: str, args: argparse.Namespace, report: SimulationReport, elapsed: float
) -> None:
    lid = args.learner_id

    def learner(name: str) -> float | None:
        return value(text, f"banditflow_learner_{name}", learner_id=lid)

    def fmt(x: float | None, digits: int = 3) -> str:
        return "n/a" if x is None else f"{x:.{digits}f}"

    env = GaussianScores(labels=args.labels, alpha=args.alpha)
    dead = sum(
        v for (name, _), v in samples(text).items() if name == "banditflow_dead_letters_total"
    )
    regret = {
        kind: value(text, "banditflow_regret", learner_id=lid, kind=kind)
        for kind in ("estimate", "exact")
    }
    print("\nsummary (from the worker's /metrics)")
    print(f"  decisions            {fmt(learner('decisions'), 0)}")
    print(f"  feedback applied     {fmt(learner('feedback'), 0)}")
    print(f"  coverage             {fmt(learner('coverage'))}  (target {args.alpha})")
    print(f"  mean set size        {fmt(learner('mean_set_size'), 2)}  of {args.labels} labels")
    print(f"  threshold            {fmt(learner('threshold'))}  (tau* = {env.tau_star:.3f})")
    print(f"  regret estimate      {fmt(regret['estimate'], 2)}")
    print(f"  regret (exact)       {fmt(regret['exact'], 2)}  (from the truth topic)")
    print(f"  dead letters         {dead:.0f}")
    print(f"  events/s             {report.decisions_per_s:.0f} decisions/s end to end")
    print(f"  wall time            {elapsed:.1f}s")
