"""The package list, which pyproject.toml cannot give: the packages found under installer/ and
service/, plus playbooks/ and terraform/modules/ as data packages inside `installer` (mapped in
pyproject.toml's package-dir), so an installed wheel carries what it configures hosts with.
"""

from setuptools import find_packages, setup

DATA_PACKAGES = ["installer._data.playbooks", "installer._data.terraform"]

setup(packages=[*find_packages(include=["installer*", "service*"]), *DATA_PACKAGES])
