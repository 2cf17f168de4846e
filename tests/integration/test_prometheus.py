"""deploy/ against real Prometheus: promtool on the rules, the config and a worker's /metrics,
then a real Prometheus scraping a real worker that learned from a simulated stream, and
every panel query of every Grafana dashboard and every alert rule evaluated through
Prometheus' HTTP API.

Needs Debian's ``prometheus`` package (``/usr/bin/prometheus`` and ``/usr/bin/promtool``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import run_prefix
from kafka import KafkaProducer

from banditflow.learners.registry import family as declared_family
from banditflow.offline.environments import applications
from banditflow.processors.estimators import MIN_INTERVAL_SIZE
from banditflow.processors.ope import LOGGED
from banditflow.streams.broker import free_port
from banditflow.streams.scrape import fetch
from banditflow.streams.simulate import SimulationSettings, run_simulations

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
DASHBOARDS = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))
DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
COMPOSE = DEPLOY / "docker-compose.yml"

JOB = "banditflow"  # the scrape job the rules and dashboards select on
GATEWAY_JOB = "banditflow-gateway"  # ... and the gateways' (the overview's "Gateway" row)
RATE_INTERVAL = "15s"  # stands in for Grafana's $__rate_interval (1 s scrapes here)
# The demo's applications, a learner and its baseline per family, briefly.
FAMILIES = sorted(applications())
EVENTS = 200
SIM_LEARNER = "conformal-sps"
LEARNERS = {f"{family}-{algorithm}" for family, a in applications().items()
            for algorithm in (a.learner, a.baseline)}
# Live OPE: the learners of families whose decisions carry p evaluate their baseline and a
# twin of themselves as candidates (the live OPE panels need one). Whether a candidate's
# estimates reach the effective sample size an interval needs
# (processors.estimators.MIN_INTERVAL_SIZE) within the run depends on when feedback lands:
# the twin learns only from the rounds explore_eval accepts. In three runs (2026-11-28) the
# twin's ESS over 200 rounds was 40, 64 and 12, the baseline's 6, 162 and 152. The logged
# policy's (weights of 1) and the paired differences' (one term a round) always reach it.
CANDIDATES = {family: [a.learner, a.baseline] for family, a in applications().items()
              if declared_family(family).action_distribution}
# Panels allowed to return no data here (nothing fires during the test).
MAY_BE_EMPTY = {"Firing banditflow alerts"}
# The alerts the deployment promises (more may exist).
REQUIRED_ALERTS = {
    "BanditflowWorkerDown",
    "BanditflowDeadLetters",
    "BanditflowPendingDecisionsGrowing",
    "BanditflowCoverageBelowTarget",
    "BanditflowDecisionLatencyHigh",
}



def binary(name: str) -> str:
    path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if path is None:
        pytest.skip(f"{name} not found: install Debian's prometheus package "
                    "(apt-get install prometheus)")
    return path


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary("promtool"), *args], input=stdin, capture_output=True,
                          text=True, timeout=60)


def dashboard_panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those nested in (collapsed) rows included; rows themselves excluded."""
    for panel in board["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


# ------------------------------------------------------------------------ static checks
def test_promtool_checks_rules_and_config() -> None:
    rules = promtool("check", "rules", str(ALERTS))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    # rule_files in prometheus.yml are relative to the config file, so this resolves alerts.yml.
    config = promtool("check", "config", str(PROMETHEUS_CONFIG))
    assert config.returncode == 0, config.stdout + config.stderr
    assert "1 rule files found" in config.stdout + config.stderr
    assert re.search(rf"job_name:\s*{JOB}\s*$", PROMETHEUS_CONFIG.read_text(), re.M)


def test_deploy_files_reference_each_other() -> None:
    compose = COMPOSE.read_text()
    # Every host path mounted or built by the compose file exists.
    for relative in re.findall(r"^\s*-\s*(\./[^:\s]+):", compose, re.M):
        assert (DEPLOY / relative).exists(), relative
    assert (DEPLOY / "Dockerfile").exists() and "dockerfile: deploy/Dockerfile" in compose
    assert "apache/kafka:" in compose and "KAFKA_PROCESS_ROLES: broker,controller" in compose
    # Dashboards use the provisioned data source, by uid; dashboard uids are unique.
    uid = re.search(r"^\s*uid:\s*(\S+)", DATASOURCES.read_text(), re.M)
    assert uid is not None
    assert len(DASHBOARDS) >= 2
    uids = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        uids.append(board["uid"])
        panels = list(dashboard_panels(board))
        assert panels, path.name
        for panel in panels:
            assert panel["datasource"]["uid"] == uid.group(1), (path.name, panel["title"])
            assert panel["targets"], (path.name, panel["title"])
            for target in panel["targets"]:
                assert target["expr"].strip(), (path.name, panel["title"])
        for variable in board.get("templating", {}).get("list", []):
            assert variable["datasource"]["uid"] == uid.group(1), (path.name, variable["name"])
    assert len(uids) == len(set(uids))


# ------------------------------------------------------------------------ live stack
class Prometheus:
    """A real Prometheus server on a free port with its own TSDB directory."""

    def __init__(self, config: Path, data: Path, port: int, log_path: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                [binary("prometheus"), f"--config.file={config}",
                 f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{port}",
                 "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT)

    def get(self, path: str, **params: str) -> dict[str, Any]:
        url = f"{self.url}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:  # 400/422 carry the error as JSON
            return json.loads(error.read())

    def query(self, expr: str) -> dict[str, Any]:
        return self.get("/api/v1/query", query=expr)

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"prometheus exited:\n{self.log_path.read_text()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"prometheus not ready:\n{self.log_path.read_text()}")

    def wait_for(self, what: str, check: Callable[[], bool], timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[Callable[[str], Prometheus]]:
    started: list[Prometheus] = []

    def start(target: str, gateway_target: str) -> Prometheus:
        # JSON is YAML: the test config needs no YAML library.
        config = tmp_path / "prometheus.yml"
        config.write_text(json.dumps({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "rule_files": [str(ALERTS)],
            "scrape_configs": [
                {"job_name": JOB, "static_configs": [{"targets": [target]}]},
                {"job_name": GATEWAY_JOB, "static_configs": [{"targets": [gateway_target]}]},
            ],
        }))
        checked = promtool("check", "config", str(config))
        assert checked.returncode == 0, checked.stdout + checked.stderr
        server = Prometheus(config, tmp_path / "tsdb", free_port(), tmp_path / "prometheus.log")
        started.append(server)
        server.wait_ready()
        return server

    yield start
    for server in started:
        server.stop()


def dead_letter(producer: KafkaProducer, prefix: str) -> None:
    """A malformed record, so that a dead letter exists."""
    producer.send(f"{prefix}.contexts", key=b"graph", value=b"{not json")
    producer.flush()


def variable_values(prometheus: Prometheus, query: str) -> list[str]:
    """Resolve a Grafana ``label_values(selector, label)`` variable query like Grafana does."""
    match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query.strip())
    assert match, f"unsupported variable query {query!r}"
    selector, label = match.groups()
    series = prometheus.get("/api/v1/series", **{"match[]": selector})
    assert series["status"] == "success", (query, series)
    return sorted({s[label] for s in series["data"] if label in s})


def substitute(expr: str, values: dict[str, str]) -> str:
    expr = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__interval", "1s")
    for name, value in values.items():
        expr = re.sub(rf"\$\{{{name}(:\w+)?\}}|\[\[{name}\]\]|\${name}\b",
                      lambda _, value=value: value, expr)
    assert "$" not in expr, f"unsubstituted variable in {expr!r}"
    return expr


def test_dashboards_and_alerts_against_real_prometheus(
    broker, start_worker, start_gateway, start_prometheus, producer: KafkaProducer,
    tmp_path: Path
) -> None:
    binary("prometheus")
    started = time.monotonic()
    prefix = run_prefix("promtest")
    worker = start_worker(prefix, partitions=2)
    gateway = start_gateway(prefix)
    prometheus = start_prometheus(f"127.0.0.1:{worker.web_port}",
                                  f"127.0.0.1:{gateway.metrics_port}")

    dead_letter(producer, prefix)
    reports = run_simulations([
        SimulationSettings(kafka=broker.connection, prefix=prefix, family=family,
                           baseline=True, events=EVENTS, window=100, delay_mean=0.05,
                           timeout=60, workdir=tmp_path / "logs",
                           candidates=CANDIDATES.get(family, []))
        for family in FAMILIES
    ])
    for report in reports:
        assert not report.timed_out and report.decided == 2 * EVENTS, report.render()
    # Gateway traffic: decisions (200) and a refused context (422), for the "Gateway" row.
    for i in range(20):
        answer = httpx.post(f"{gateway.url}/v1/learners/{SIM_LEARNER}/decisions",
                            json={"labels": ["a", "b"], "scores": [float(i), 0.0]}, timeout=30)
        assert answer.status_code == 200, answer.text
    assert httpx.post(f"{gateway.url}/v1/learners/{SIM_LEARNER}/decisions",
                      json={"labels": "a"}).status_code == 422

    # promtool lints the exposition the worker serves.
    exposition = worker.metrics()
    lint = promtool("check", "metrics", stdin=exposition)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    exported = set(re.findall(r"^# TYPE (\S+) ", exposition, re.M))
    gateway_exposition = fetch(f"http://127.0.0.1:{gateway.metrics_port}/metrics")
    lint = promtool("check", "metrics", stdin=gateway_exposition)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    exported |= set(re.findall(r"^# TYPE (\S+) ", gateway_exposition, re.M))

    def has_data(expr: str) -> bool:
        result = prometheus.query(expr)
        return result["status"] == "success" and bool(result["data"]["result"])

    # Wait until Prometheus has scraped the final state of every family.
    for expr in (*(f'banditflow_learner_feedback{{learner_id="{lid}"}} >= {EVENTS}'
                   for lid in LEARNERS),
                 *(f'banditflow_regret{{learner_id="{lid}", kind="exact"}}' for lid in LEARNERS),
                 'banditflow_learner_mean_loss{family="graph_cb"}',
                 'banditflow_learner_mean_reward{family="prob_graph"}',
                 'banditflow_arm_pulls{family="prob_graph"}',
                 'banditflow_learner_opt_reward{family="deferral"}',
                 'banditflow_dead_letters_total{reason="malformed_json"}',
                 'banditflow_gateway_requests_total{status="422"}',
                 *(f'banditflow_ope_estimate{{policy="{name}", estimator="dr", bound="{bound}"}}'
                   for names in CANDIDATES.values()
                   for name, bound in ((names[0], "value"), (LOGGED, "ci_low"))),
                 *(f'banditflow_ope_difference{{policy="{names[0]}", estimator="dr", '
                   'bound="ci_low"}' for names in CANDIDATES.values())):
        prometheus.wait_for(expr, lambda expr=expr: has_data(expr))
    time.sleep(2.0)  # a few more scrapes, so that every rate window holds two samples

    # A policy's estimates carry an interval exactly when its ESS (never above its rounds)
    # allows one, seen in one evaluation (one scrape) of both.
    enough = f"banditflow_ope_effective_sample_size >= {MIN_INTERVAL_SIZE}"
    intervals = 'banditflow_ope_estimate{bound="ci_low"}'
    for expr in (f"{enough} unless on (learner_id, policy) {intervals}",
                 f"{intervals} unless on (learner_id, policy) ({enough})"):
        result = prometheus.query(expr)
        assert result["status"] == "success" and not result["data"]["result"], (expr, result)

    # Every panel query of every dashboard, with "All" and with the values Grafana would list.
    checked = 0
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        resolved: dict[str, list[str]] = {}
        for variable in board.get("templating", {}).get("list", []):
            query = substitute(variable["query"], {n: ".*" for n in resolved})
            resolved[variable["name"]] = variable_values(prometheus, query)
            assert resolved[variable["name"]], f"{path.name}: ${variable['name']} lists nothing"
        if "learner_id" in resolved:
            assert set(resolved["learner_id"]) >= LEARNERS
        if "family" in resolved:
            assert set(FAMILIES) <= set(resolved["family"])
        choices = [
            {n: ".*" for n in resolved},
            # Grafana's multi-value format: regex-escaped, backslashes doubled for the string
            {n: "(" + "|".join(re.escape(v).replace("\\", "\\\\") for v in vs) + ")"
             for n, vs in resolved.items()},
        ]
        for panel in dashboard_panels(board):
            for target in panel["targets"]:
                names = set(re.findall(r"\b(banditflow_\w+)", target["expr"]))
                for name in names:  # no typo'd metric names (they would just be empty)
                    base = re.sub(r"_(bucket|sum|count)$", "", name)
                    assert name in exported or base in exported, (path.name, panel["title"], name)
                for values in choices:
                    expr = substitute(target["expr"], values)
                    result = prometheus.query(expr)
                    where = f"{path.name} / {panel['title']} / {target['refId']}: {expr}"
                    assert result["status"] == "success", f"{where}: {result}"
                    if panel["title"] not in MAY_BE_EMPTY:
                        assert result["data"]["result"], f"{where} returned no data"
                    checked += 1
    assert checked >= 40

    # The simulated learner's core series, by value.
    coverage = prometheus.query(f'banditflow_learner_coverage{{learner_id="{SIM_LEARNER}"}}')
    assert 0.5 < float(coverage["data"]["result"][0]["value"][1]) <= 1.0
    decided = prometheus.query(f'sum(banditflow_records_total{{job="{JOB}", outcome="decided"}})')
    assert float(decided["data"]["result"][0]["value"][1]) >= 2 * EVENTS * len(FAMILIES)

    # Every alert rule is loaded, evaluates without error, and its expression is valid.
    def rules() -> list[dict[str, Any]]:
        groups = prometheus.get("/api/v1/rules")["data"]["groups"]
        return [rule for group in groups for rule in group["rules"]]

    prometheus.wait_for("every rule evaluated",
                        lambda: all(r["health"] == "ok" for r in rules()), timeout_s=10)
    loaded = rules()
    assert {r["name"] for r in loaded if r["type"] == "alerting"} >= REQUIRED_ALERTS
    for rule in loaded:
        assert not rule.get("lastError"), rule
        result = prometheus.query(rule["query"])
        assert result["status"] == "success", (rule["name"], result)
    alerts = prometheus.get("/api/v1/alerts")["data"]["alerts"]
    assert not [a for a in alerts if a["state"] == "firing"], alerts
    for name in re.findall(r"\b(banditflow_\w+)", ALERTS.read_text()):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in exported or base in exported, name

    # A stopped worker turns BanditflowWorkerDown pending (it fires after its `for: 1m`).
    worker.stop()

    def worker_down_pending() -> bool:
        alerts = prometheus.get("/api/v1/alerts")["data"]["alerts"]
        return any(a["labels"]["alertname"] == "BanditflowWorkerDown"
                   and a["state"] in ("pending", "firing") for a in alerts)

    prometheus.wait_for("BanditflowWorkerDown", worker_down_pending, timeout_s=15)
    assert time.monotonic() - started < 90
