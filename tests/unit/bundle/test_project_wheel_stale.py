"""The gateway wheel a bundle carries is built from the checkout as it is now: a module that
setuptools' build/ folder still holds from an earlier build must not ride along."""

import subprocess
import zipfile
from pathlib import Path

import pytest

from installer.base.paths import CHECKOUT
from installer.bundle import project_wheel


@pytest.mark.skipif(CHECKOUT is None or not (CHECKOUT / ".git").exists(), reason="needs the git checkout")
def test_a_module_left_in_build_is_not_in_the_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert CHECKOUT is not None
    src = tmp_path / "src"
    files = subprocess.run(["git", "-C", str(CHECKOUT), "ls-files", "-z"], capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        path = CHECKOUT / name
        wanted = "/" not in name or name.split("/")[0] in ("installer", "service", "playbooks", "terraform")
        if wanted and path.is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes(path.read_bytes())
    stale = src / "build" / "lib" / "service" / "gone_since.py"  # as an earlier build left it
    stale.parent.mkdir(parents=True)
    stale.write_text("raise SystemExit('stale')\n")
    monkeypatch.setattr(project_wheel, "CHECKOUT", src)
    wheel = project_wheel.build(tmp_path / "out")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert "service/app.py" in names and "installer/inventory/vllm_names.json" in names
    assert "service/gone_since.py" not in names
