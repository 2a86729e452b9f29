"""A small typed wrapper over the terraform CLI: `terraform -chdir=DIR <cmd> -json`.

Why not python-terraform: its last release (0.10.1, 2019) passes the working directory as a
positional argument, which Terraform removed in 0.15 ("Too many command line arguments. Did
you mean to use -chdir?"); its destroy() always adds -force, also gone since 0.15; apply()
only adds -auto-approve under skip_plan=True; and it returns text to scrape, not Terraform's
machine-readable `-json` event stream. This module reads that stream instead.
"""

import json
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from installer.terraform.errors import TerraformError

Event = dict[str, Any]
OnEvent = Callable[[Event], None]


@dataclass(frozen=True)
class Diagnostic:
    severity: str
    summary: str
    detail: str = ""
    where: str = ""  # file:line in the configuration, when Terraform gives one

    def line(self) -> str:
        text = f"{self.severity}: {self.summary}"
        if self.where:
            text = f"{self.where}: {text}"
        return f"{text} — {self.detail}" if self.detail else text

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Diagnostic":
        rng = data.get("range") or {}
        where = f"{rng['filename']}:{rng['start']['line']}" if rng.get("filename") else ""
        detail = " ".join(str(data.get("detail", "")).split())
        return cls(str(data.get("severity", "error")), str(data.get("summary", "")), detail, where)


@dataclass(frozen=True)
class ResourceChange:
    address: str
    action: str  # create, update, delete, replace, read, noop


@dataclass
class ChangeSummary:
    add: int = 0
    change: int = 0
    remove: int = 0
    changes: list[ResourceChange] = field(default_factory=list)
    warnings: list[Diagnostic] = field(default_factory=list)

    @property
    def has_changes(self) -> bool:
        return bool(self.add or self.change or self.remove)


class Terraform:
    """One working directory (root module + state), one environment, one terraform binary."""

    def __init__(self, binary: str, workdir: Path, env: Mapping[str, str]) -> None:
        self.binary = binary
        self.workdir = workdir
        self.env = dict(env)

    def _argv(self, *args: str) -> list[str]:
        # -chdir comes before the subcommand; it replaced the positional directory in 0.15.
        return [self.binary, f"-chdir={self.workdir}", *args]

    def _run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                self._argv(*args),
                capture_output=True,
                text=True,
                env=self.env,
                timeout=timeout,
                check=False,
            )
        except FileNotFoundError as exc:
            raise TerraformError(
                f"terraform not found ({self.binary}); install it or use a bundle that carries it"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise TerraformError(f"terraform {args[0]} timed out after {timeout:.0f} s") from exc

    def version(self) -> str:
        proc = self._run("version", "-json", timeout=60)
        if proc.returncode != 0:
            raise TerraformError("`terraform version` failed", _tail(proc.stderr))
        try:
            return str(json.loads(proc.stdout)["terraform_version"])
        except (ValueError, KeyError, TypeError) as exc:
            raise TerraformError(
                f"`{self.binary} version -json` printed no version; is it terraform?", _tail(proc.stdout)
            ) from exc

    def init(self) -> None:
        proc = self._run("init", "-input=false", "-no-color")
        if proc.returncode != 0:
            raise TerraformError(f"terraform init failed in {self.workdir}", _tail(proc.stderr))

    def plan(
        self, out: Path, *, destroy: bool = False, on_event: OnEvent | None = None
    ) -> ChangeSummary:
        args = ["plan", "-json", "-input=false", f"-out={out}"] + (["-destroy"] if destroy else [])
        return self._stream("plan", args, on_event)

    def apply(self, plan: Path, *, on_event: OnEvent | None = None) -> ChangeSummary:
        # A saved plan applies exactly what was shown, with no second prompt.
        return self._stream("apply", ["apply", "-json", "-input=false", str(plan)], on_event)

    def outputs(self) -> dict[str, Any]:
        proc = self._run("output", "-json", timeout=120)
        if proc.returncode != 0:
            raise TerraformError("terraform output failed", _tail(proc.stderr))
        return dict(json.loads(proc.stdout or "{}"))

    def _stream(self, what: str, args: list[str], on_event: OnEvent | None) -> ChangeSummary:
        """Run a -json command, following its event stream line by line (plans/applies are long)."""
        summary = ChangeSummary()
        errors: list[Diagnostic] = []
        try:
            proc = subprocess.Popen(
                self._argv(*args),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=self.env,
            )
        except FileNotFoundError as exc:
            raise TerraformError(f"terraform not found ({self.binary})") from exc
        assert proc.stdout is not None and proc.stderr is not None
        for raw in proc.stdout:
            try:
                event: Event = json.loads(raw)
            except json.JSONDecodeError:
                continue  # a provider's stray print; the stream itself is JSON lines
            _fold(event, summary, errors)
            if on_event:
                on_event(event)
        stderr = proc.stderr.read()
        if proc.wait() != 0 or errors:
            details = [d.line() for d in errors] or _tail(stderr)
            raise TerraformError(f"terraform {what} failed in {self.workdir}", details)
        return summary


def _fold(event: Event, summary: ChangeSummary, errors: list[Diagnostic]) -> None:
    kind = event.get("type")
    if kind == "planned_change":
        change = event.get("change", {})
        summary.changes.append(ResourceChange(change["resource"]["addr"], change["action"]))
    elif kind == "change_summary":
        counts = event.get("changes", {})
        summary.add, summary.change, summary.remove = (
            int(counts.get("add", 0)),
            int(counts.get("change", 0)),
            int(counts.get("remove", 0)),
        )
    elif kind == "diagnostic":
        diag = Diagnostic.from_json(event.get("diagnostic", {}))
        (errors if diag.severity == "error" else summary.warnings).append(diag)


def _tail(text: str, lines: int = 12) -> list[str]:
    return [line for line in text.strip().splitlines() if line.strip()][-lines:]
