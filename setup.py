"""The package list, which pyproject.toml cannot give: the packages found under installer/ and
service/, plus playbooks/ and terraform/modules/ as data packages inside `installer` (mapped in
pyproject.toml's package-dir), so an installed wheel carries what it configures hosts with.
"""

import os

from setuptools import find_packages, setup

DATA_PACKAGES = ["installer._data.playbooks", "installer._data.terraform"]
# setuptools copies into build/ and never removes what the source no longer has, so a module
# deleted or renamed since the last build would ride along in the next wheel; the bundle's
# builder (installer/bundle/project_wheel.py) names a fresh folder instead.
BUILD_BASE = os.environ.get("PLI_BUILD_BASE", "build")

setup(packages=[*find_packages(include=["installer*", "service*"]), *DATA_PACKAGES],
      options={"build": {"build_base": BUILD_BASE}})
