"""One exception tree: every error the installer raises to its user is an InstallerError
(installer/base/errors.py), which the CLI prints as one red line; the CLI defines none of its own."""

import importlib
import inspect
import pkgutil

import installer
from installer.base.errors import InstallerError


def _exception_classes() -> dict[str, type[BaseException]]:
    found = {}
    for info in pkgutil.walk_packages(installer.__path__, "installer."):
        if info.name.endswith(".__main__"):  # runs a command line when imported
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                found[f"{info.name}.{name}"] = obj
    return found


def test_every_public_exception_is_an_installer_error_and_none_lives_in_the_cli() -> None:
    classes = _exception_classes()
    assert "installer.base.errors.InventoryError" in classes and "installer.flows.gpu_checks.GPUCheckError" in classes
    # a leading underscore: a signal caught inside its own module, never shown to a user
    public = {n: c for n, c in classes.items() if not n.rpartition(".")[2].startswith("_")}
    outside = [n for n, c in public.items() if not issubclass(c, InstallerError)]
    assert outside == []
    assert [n for n in classes if n.startswith("installer.cli.")] == []
