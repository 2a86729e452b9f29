"""The release controller: runs on the monitoring host (a systemd unit the monitoring role
installs), so a gray release advances or rolls back with the control machine off.

Each tick, when a release spec is in Redis (service/release_store.py) and this controller holds
the lease: the canary's figures over the SLO's windows from Prometheus
(service/release_promql.py), a verdict (service/release_verdict.py), and the weights the
gateways poll moved along the release's steps (advance), left (hold), set to canary 0 at once
(rollback: stable takes every caller, the canary engines stay, idle) or left at 100 (promoted).
The structural cleanup that needs Ansible (stable's units retired on promote, the canary's
removed on abort) is the next `installer release promote|abort` from the control machine,
which reads the verdict in the state.

A step is idempotent: the step, when it began and the verdict are in Redis, written with the
weights in one fenced script, so a controller killed anywhere starts again (systemd's
Restart=always) from what Redis says. Every decision, with its figures, is one JSON line in
the audit log and the controller's own /metrics (scraped by the monitoring Prometheus, whose
rules alert on a rollback and on a blind hold).
"""

import argparse
import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from service import release_promql, release_slo
from service.release_store import Fenced, Store, holder_name
from service.release_verdict import Policy, Relative, Verdict, decide

log = logging.getLogger("service.release_controller")


def policy_of(spec: dict[str, Any]) -> Policy:
    """The pushed spec's SLO (ReleaseSettings of the canary's inventory) as a Policy."""
    slo = spec["slo"]
    relative = None
    if slo.get("relative", True):
        relative = Relative(slo["error_ratio_margin"], slo["ttft_p99_ratio"], slo["e2e_p95_ratio"],
                            slo["latency_floor_s"])
    return Policy(window_s=float(slo["window_s"]), min_requests=int(slo["min_requests"]),
                  dwell_s=float(spec["dwell_s"]), relative=relative,
                  absolute=tuple(release_slo.parse(line) for line in slo.get("absolute", ())))


class ControllerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        p = "pli_release_controller_"
        self.leader = Gauge(p + "leader", "1 while this controller holds the lease and acts", registry=self.registry)
        self.weight = Gauge(p + "canary_weight", "canary percent the gateways are told", ["model"],
                            registry=self.registry)
        self.step = Gauge(p + "step", "index of the release's current step", ["model"], registry=self.registry)
        self.verdict = Gauge(p + "verdict", "1 for the release's verdict (running, promoted, rolled_back)",
                             ["model", "verdict"], registry=self.registry)
        self.blind = Gauge(p + "blind", "1 while the last decision held for want of figures (Prometheus)",
                           registry=self.registry)
        self.decisions = Counter(p + "decisions", "decisions by action and cause", ["model", "action", "kind"],
                                 registry=self.registry)
        self.figure = Gauge(p + "figure", "the last decision's figures", ["model", "stage", "window", "metric"],
                            registry=self.registry)
        self.last_tick = Gauge(p + "last_tick_timestamp_seconds", "when the controller last ran a tick",
                               registry=self.registry)

    def idle(self) -> None:
        """No release: nothing for the rules to alert on (a past rollback stops firing)."""
        for labelled in (self.weight, self.step, self.verdict, self.figure):
            labelled.clear()
        self.blind.set(0)

    def observe(self, served: str, state: dict[str, Any], v: Verdict | None) -> None:
        self.weight.labels(served).set(state["weight"])
        self.step.labels(served).set(state["step"])
        for verdict in ("running", "promoted", "rolled_back"):
            self.verdict.labels(served, verdict).set(1 if state["verdict"] == verdict else 0)
        if v is None:
            return
        self.blind.set(1 if v.kind == "blind" else 0)
        self.decisions.labels(served, v.action, v.kind).inc()
        for w, stages in (v.figures or {}).items():
            for stage, f in stages.items():
                self.figure.labels(served, stage, f"{w:g}", "requests").set(f.requests)
                for metric in release_slo.METRICS:
                    value = f.value(metric)
                    if value is not None:
                        self.figure.labels(served, stage, f"{w:g}", metric).set(value)


class Audit:
    """One JSON line per decision, appended (0640: figures, never a secret)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def write(self, record: dict[str, Any]) -> None:
        log.info("%s", json.dumps(record, sort_keys=True))
        if self.path is None:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        with os.fdopen(fd, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")


class Controller:
    # A hold like the last one written goes to the audit log at most this often (the state in
    # Redis and /metrics always have the latest): a long dwell is not thousands of equal lines.
    REPEAT_HOLD_S = 60.0

    def __init__(self, store: Store, query: release_promql.Query, audit: Audit,
                 metrics: ControllerMetrics | None = None) -> None:
        self.store, self.query, self.audit = store, query, audit
        self.metrics = metrics or ControllerMetrics()
        self._last_hold: tuple[str, str, int, float] | None = None  # release, kind, weight, when written

    def tick(self) -> dict[str, Any] | None:
        """One look at the release: the record written, or None (idle, standby, or over)."""
        spec = self.store.spec()
        if spec is None:
            self.metrics.leader.set(0)
            self.metrics.idle()
            self.store.give_up()  # no release: another controller may as well hold it next time
            return None
        if not self.store.lease():
            self._stand_by()
            return None
        self.metrics.leader.set(1)
        try:
            return self._tick(spec)
        except Fenced as exc:
            self._stand_by()
            log.warning("standing by: %s", exc)
            return None

    def _stand_by(self) -> None:
        """Not the one acting: none of the release's gauges, so the alert rules read the leader's
        alone (a standby's last `blind` or `rolled_back` would keep them firing)."""
        self.metrics.leader.set(0)
        self.metrics.idle()

    def _tick(self, spec: dict[str, Any]) -> dict[str, Any] | None:
        now = self.store.now()
        served, steps = spec["served_name"], [int(s) for s in spec["steps"]]
        state = self.store.state()
        if state is None or state.get("release") != spec["id"]:
            state = {"release": spec["id"], "served_name": served, "step": 0, "step_since": now,
                     "weight": steps[0], "verdict": "running"}
            self.store.write(state, {served: steps[0]})
            record = {"at": now, "release": spec["id"], "model": served, "action": "start", "weight": steps[0],
                      "holder": self.store.token}
            self.audit.write(record)
            self.metrics.observe(served, state, None)
            return record
        if state["verdict"] != "running":
            self.metrics.observe(served, state, None)
            return None
        policy = policy_of(spec)
        step, weight = state["step"], steps[state["step"]]
        blind, ready = "", None
        query = release_promql.within(self.query, time.monotonic() + self.store.lease_ms / 2000)
        try:
            figures: release_promql.Figures | None = release_promql.fetch(query, served, policy)
            ready = release_promql.readiness(query, list(spec.get("canary_engines", ())), policy.window_s)
        except release_promql.Unreachable as exc:
            figures, blind = None, str(exc)
        if not self.store.lease(renew_only=True):  # renewed before writing: the queries may have taken a while
            raise Fenced("the lease passed to another controller while Prometheus answered")
        v = decide(policy, figures, weight=weight, held_s=now - state["step_since"],
                   last_step=step == len(steps) - 1, blind_reason=blind or "no figures", canary_ready=ready)
        if v.action in ("advance", "promote") and not spec.get("auto_promote", True):
            v = Verdict("hold", "awaiting_promote", (*v.reasons, "auto_promote is off: `installer release "
                                                                  "promote` takes the next step"), v.figures)
        new = dict(state)
        weights: dict[str, int] | None = None
        if v.action == "rollback":
            new.update(verdict="rolled_back", weight=0, ended=now)
            weights = {served: 0}
        elif v.action == "advance":
            new.update(step=step + 1, step_since=now, weight=steps[step + 1])
            weights = {served: steps[step + 1]}
        elif v.action == "promote":
            new.update(verdict="promoted", ended=now)
        record = {"at": now, "release": spec["id"], "model": served, "weight": weight, "step": step,
                  "held_s": round(now - state["step_since"], 3), "holder": self.store.token, **v.to_record()}
        new["last"] = record
        self.store.write(new, weights)
        if v.action != "hold":
            self._last_hold = None
            self.audit.write(record)
        elif (self._last_hold is None or self._last_hold[:3] != (spec["id"], v.kind, weight)
              or now - self._last_hold[3] >= self.REPEAT_HOLD_S):
            self._last_hold = (spec["id"], v.kind, weight, now)
            self.audit.write(record)
        self.metrics.observe(served, new, v)
        return record


def settings_of(path: Path) -> dict[str, Any]:
    """The controller's settings file (the monitoring role writes it, 0600, with the Redis URL
    and its password: never on a command line, never logged)."""
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict) or "redis_url" not in doc or "prometheus_url" not in doc:
        raise SystemExit(f"{path}: expected an object with redis_url and prometheus_url")
    return doc


def redis_client(settings: dict[str, Any]) -> Any:
    """The deployment's Redis as the settings name it (rediss:// with the host's certificate;
    the primary that `redis_sentinels` name, when the settings have them)."""
    from service.redis_connect import Endpoint, TLSFiles, parse_sentinel, sync_client

    tls = settings.get("tls") or {}
    files = TLSFiles(tls["ca_file"], tls["certfile"], tls["keyfile"]) if tls else None
    # With sentinels the controller follows a failover like the gateways (service/redis_connect.py).
    sentinels = tuple(parse_sentinel(s) for s in settings.get("redis_sentinels") or ())
    return sync_client(Endpoint(settings["redis_url"], sentinels, settings.get("redis_master", "pli"), files), 2)


def run(controller: Controller, interval_s: float, stop: Callable[[], bool],
        sleep: Callable[[float], None] = time.sleep) -> None:
    while not stop():
        try:
            controller.tick()
        except Exception as exc:  # Redis down, a spec it cannot read: the next tick tries again
            controller.metrics.leader.set(0)
            log.error("tick failed: %s: %s", type(exc).__name__, exc)
        controller.metrics.last_tick.set(time.time())
        sleep(interval_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m service.release_controller")
    parser.add_argument("--settings", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    s = settings_of(args.settings)
    client = redis_client(s)
    store = Store(client, holder_name(), lease_ms=int(s.get("lease_ms", 10_000)))
    metrics = ControllerMetrics()
    start_http_server(int(s.get("metrics_port", 9464)), addr=s.get("metrics_address", "127.0.0.1"),
                      registry=metrics.registry)
    audit = Audit(Path(s["audit_log"]) if s.get("audit_log") else None)
    # One query at most a quarter of the lease, and none asked after half of it (release_promql.
    # within): the lease is renewed after them, before anything is written.
    query = release_promql.http_query(s["prometheus_url"], timeout_s=min(5.0, store.lease_ms / 4000))
    controller = Controller(store, query, audit, metrics)
    stopping = False

    def _stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    run(controller, float(s.get("interval_s", 2.0)), lambda: stopping)
    with contextlib.suppress(Exception):  # the lease expires by itself anyway
        store.give_up()  # a clean stop hands over at once instead of after the lease's deadline


if __name__ == "__main__":
    main()
