"""Real Prometheus and Alertmanager processes wired for tests, with short timers.

    rules = fast_rules(workdir / "rules")                     # alerts/*.rules.yml, `for: 1s`
    with running_alertmanager(workdir, alertmanager_config(hook)) as am, \
         running_prometheus(workdir, jobs, rules, am) as prom:
        ...

Only the timers change: the rule expressions, labels, routes, grouping and inhibition rules are
the committed ones, so what reaches the webhook is what production would send.
"""
from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.conftest import ROOT, free_port, stop_process, wait_http

ALERTS_DIR = ROOT / "alerts"
ALERTMANAGER_BINARIES = ("prometheus-alertmanager", "alertmanager")  # Debian, upstream names


def binary(*names: str) -> str:
    for name in names:
        if path := shutil.which(name):
            return path
    raise AssertionError(f"{names[0]} not found: install the Debian packages `prometheus` and "
                         "`prometheus-alertmanager` (make tools)")


def fast_rules(directory: Path, for_: str = "1s") -> Path:
    """The committed rule files with every alert's `for` shortened."""
    directory.mkdir(parents=True, exist_ok=True)
    for path in ALERTS_DIR.glob("*.rules.yml"):
        doc = yaml.safe_load(path.read_text())
        for group in doc["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    rule["for"] = for_
        (directory / path.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    return directory


def alertmanager_config(webhook_url, timers: dict | None = None) -> dict:
    """alerts/alertmanager.yml with each receiver posting to webhook_url(receiver name) and
    every route on short group_wait/group_interval/repeat_interval."""
    config = yaml.safe_load((ALERTS_DIR / "alertmanager.yml").read_text())
    config["templates"] = [str(ALERTS_DIR / t) for t in config.get("templates", [])]
    timers = timers or {"group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"}
    routes = [config["route"]]
    while routes:
        route = routes.pop()
        route.update({k: v for k, v in timers.items() if route is config["route"] or k in route})
        routes.extend(route.get("routes", []))
    for receiver in config["receivers"]:
        receiver["webhook_configs"] = [{"url": webhook_url(receiver["name"]),
                                        "send_resolved": True}]
    return config


@contextlib.contextmanager
def _process(args: list[str], ready_url: str, log_path: Path):
    log = open(log_path, "wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http(ready_url, proc, timeout=60)
        yield
    finally:
        stop_process(proc)
        log.close()


@contextlib.contextmanager
def running_alertmanager(workdir: Path, config: dict):
    """Yields the base URL of an Alertmanager (no cluster port) running this config."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "alertmanager.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    base = f"127.0.0.1:{free_port()}"
    args = [binary(*ALERTMANAGER_BINARIES), f"--config.file={workdir / 'alertmanager.yml'}",
            f"--storage.path={workdir / 'am-data'}", f"--web.listen-address={base}",
            "--cluster.listen-address=", "--log.level=warn"]
    with _process(args, f"http://{base}/-/ready", workdir / "alertmanager.log"):
        yield f"http://{base}"


@contextlib.contextmanager
def running_prometheus(workdir: Path, jobs: list[dict], rule_dir: Path, alertmanager: str,
                       interval: str = "1s"):
    """Yields the base URL of a Prometheus scraping `jobs` and alerting into `alertmanager`."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = {"global": {"scrape_interval": interval, "evaluation_interval": interval,
                         "scrape_timeout": interval},
              "rule_files": [str(rule_dir / "*.rules.yml")], "scrape_configs": jobs,
              "alerting": {"alertmanagers": [{"static_configs": [
                  {"targets": [alertmanager.removeprefix("http://")]}]}]}}
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    base = f"127.0.0.1:{free_port()}"
    args = [binary("prometheus"), f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'prom-data'}", f"--web.listen-address={base}",
            "--rules.alert.resend-delay=1s", "--log.level=warn"]
    with _process(args, f"http://{base}/-/ready", workdir / "prometheus.log"):
        yield f"http://{base}"
