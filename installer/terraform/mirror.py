"""Terraform without the internet: its binary and a provider filesystem mirror in the bundle.

Bundle layout (next to wheels/, model/, ... and listed in manifest.json like every file):
    terraform/bin/terraform
    terraform/plugins/registry.terraform.io/<namespace>/<type>/<version>/<os>_<arch>/...
The plugins tree is Terraform's "unpacked" filesystem-mirror layout, so the CLI config we
write points `provider_installation { filesystem_mirror { path = ... } }` at it and nothing is
downloaded. The bundle builder calls `add_to_bundle`; `installer up|plan --bundle` take the
tools from the bundle only after its signature and every byte were verified
(bundle/terraform_tools.py).
"""

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from installer.hashing import sha256_file
from installer.inventory import Inventory
from installer.terraform.cli import Terraform
from installer.terraform.tfvars import MODULES_DIR
from installer.terraform.workdir import workdir

BUNDLE_DIR = "terraform"


@dataclass(frozen=True)
class TerraformTools:
    binary: str  # a path, or a name looked up on PATH
    plugin_mirror: Path | None  # None: providers come from their registries (online)


def locate(workdir: Path, env: Mapping[str, str] = os.environ) -> TerraformTools:
    """Explicit settings first, then the tools this deployment last used, then PATH.

    Remembering the tools lets `installer down` (no --bundle) destroy with the terraform and
    providers that `installer up --bundle` created the resources with.
    """
    mirror = env.get("INSTALLER_TF_PLUGIN_MIRROR")
    if env.get("INSTALLER_TERRAFORM") or mirror:
        binary = env.get("INSTALLER_TERRAFORM", "terraform")
        return TerraformTools(binary, Path(mirror) if mirror else None)
    remembered = workdir / "tools.json"
    if remembered.is_file():
        data = json.loads(remembered.read_text())
        mirror = data.get("plugin_mirror")
        return TerraformTools(data["binary"], Path(mirror) if mirror else None)
    return TerraformTools("terraform", None)


def remember(workdir: Path, tools: TerraformTools) -> None:
    mirror = str(tools.plugin_mirror) if tools.plugin_mirror else None
    (workdir / "tools.json").write_text(
        json.dumps({"binary": tools.binary, "plugin_mirror": mirror})
    )


def cli_config(mirror: Path) -> str:
    """A CLI config that installs every provider from the mirror and never from the network."""
    return (
        "# written by installer: providers come only from the bundle's filesystem mirror\n"
        "disable_checkpoint = true\n"
        "provider_installation {\n"
        f"  filesystem_mirror {{\n    path = {json.dumps(str(mirror))}\n  }}\n"
        "}\n"
    )


def cli_env(workdir: Path, tools: TerraformTools) -> dict[str, str]:
    """terraform's environment: our CLI config if there is a mirror; no prompts, no phoning home."""
    env = {"TF_IN_AUTOMATION": "1", "TF_INPUT": "0", "CHECKPOINT_DISABLE": "1"}
    if tools.plugin_mirror is not None:
        rc = workdir / "terraformrc"
        rc.write_text(cli_config(tools.plugin_mirror.resolve()))
        env["TF_CLI_CONFIG_FILE"] = str(rc)
    return env


def add_to_bundle(
    root: Path, module: Path, tools: TerraformTools, env: Mapping[str, str]
) -> dict[str, str]:
    """Put terraform and the providers `module` needs under root/terraform/; return their versions.

    The providers are installed by a real `terraform init` (from the registry, or from a mirror
    this machine already has), then copied from .terraform/providers, which already has the
    mirror's unpacked layout. Offline machines can therefore rebuild a bundle from a bundle.
    """
    dest = root / BUNDLE_DIR
    binary = shutil.which(tools.binary) or tools.binary
    (dest / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(binary, dest / "bin" / "terraform")
    with tempfile.TemporaryDirectory(prefix="tf-mirror-") as scratch:
        work = Path(scratch)
        shutil.copytree(module, work / "module")
        run_env = {**env, **cli_env(work, tools)}
        tf = Terraform(str(dest / "bin" / "terraform"), work / "module", run_env)
        tf.init()
        versions = {"terraform": tf.version()}
        providers = work / "module" / ".terraform" / "providers"
        shutil.copytree(providers, dest / "plugins", dirs_exist_ok=True, symlinks=False)
    for version_dir in (dest / "plugins").glob("*/*/*/*"):
        namespace, kind = version_dir.parts[-3:-1]
        versions[f"{namespace}/{kind}"] = version_dir.name
    return versions


def _tools_for(inv: Inventory, env: Mapping[str, str]) -> TerraformTools:
    return locate(workdir(inv), env)


def bundle_input(inv: Inventory, env: Mapping[str, str] = os.environ) -> dict[str, object] | None:
    """What the bundle's Terraform part depends on (its cache key), None for bare metal."""
    if inv.provider == "baremetal":
        return None
    tools = _tools_for(inv, env)
    binary = Path(shutil.which(tools.binary) or tools.binary)
    module = MODULES_DIR / inv.provider
    return {
        "provider": inv.provider,
        "module": sorted((p.name, sha256_file(p)) for p in module.glob("*.tf")),
        "binary": [str(binary), binary.stat().st_size if binary.is_file() else None],
        "mirror": str(tools.plugin_mirror) if tools.plugin_mirror else None,
    }


def add_for_inventory(
    root: Path, inv: Inventory, env: Mapping[str, str] = os.environ
) -> dict[str, str] | None:
    """The bundle builder's hook: terraform + the provider mirror for a cloud inventory."""
    if inv.provider == "baremetal":
        return None
    return add_to_bundle(root, MODULES_DIR / inv.provider, _tools_for(inv, env), env)
