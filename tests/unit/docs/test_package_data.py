"""An installed wheel carries every data file the installer and the gateway read: each file under
installer/ or service/ that is not Python is named by a package-data glob of pyproject.toml."""

import fnmatch
import tomllib

from tests.support import REPO


def test_every_data_file_of_a_package_is_package_data() -> None:
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    unshipped = []
    for top in ("installer", "service"):
        for path in sorted((REPO / top).rglob("*")):
            if not path.is_file() or path.suffix in (".py", ".pyc") or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(REPO)
            shipped = any(
                rel.is_relative_to(package.replace(".", "/"))
                and any(fnmatch.fnmatch(rel.relative_to(package.replace(".", "/")).as_posix(), g) for g in patterns)
                for package, patterns in globs.items()
            )
            if not shipped:
                unshipped.append(rel.as_posix())
    assert unshipped == [], f"name them in [tool.setuptools.package-data]: {unshipped}"
