"""GPU tests: run on a machine with an NVIDIA GPU (`pytest -m gpu tests/gpu`); CI has none."""

import shutil

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session", autouse=True)
def _needs_nvidia_smi() -> None:
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no nvidia-smi: these tests need an NVIDIA GPU")
