"""Terraform without the internet: its binary and a provider filesystem mirror in the bundle.

Bundle layout (next to wheels/, model/, ... and listed in manifest.json like every file):
    terraform/bin/terraform
    terraform/plugins/registry.terraform.io/<namespace>/<type>/<version>/<os>_<arch>/...
The plugins tree is Terraform's "unpacked" filesystem-mirror layout, so the CLI config we
write points `provider_installation { filesystem_mirror { path = ... } }` at it and nothing is
downloaded. The bundle builder calls `add_to_bundle`; `installer up|plan --bundle` take the
tools from the bundle only after its signature and every byte were verified
(bundle/terraform_tools.py).

Those tools stay in the bundle's folder (a directory bundle is verified in place; a provider is
hundreds of MB, too much to copy into every state), which its owner can change after the check.
So they carry the signed manifest's sha256 of every file under terraform/, the state remembers
those with the paths, and `check_signed` compares the folder with them right before each run:
`installer down` or `plan` without --bundle never runs a terraform the bundle did not sign.
"""

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from installer.base.hashing import sha256_file, sha256_files
from installer.inventory import Inventory
from installer.terraform.cli import Terraform
from installer.terraform.errors import TerraformError
from installer.terraform.tfvars import MODULES_DIR
from installer.terraform.workdir import workdir

BUNDLE_DIR = "terraform"


@dataclass(frozen=True)
class TerraformTools:
    binary: str  # a path, or a name looked up on PATH
    plugin_mirror: Path | None  # None: providers come from their registries (online)
    # From a verified bundle: its terraform/ folder, and the signed sha256 of every file in it
    # (relative path -> digest). None: the operator's own tools (PATH, INSTALLER_TERRAFORM).
    signed_root: Path | None = None
    signed: dict[str, str] = field(default_factory=dict)


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
        if "signed_root" not in data and os.sep in data["binary"]:
            raise TerraformError(
                f"{remembered} (written by an older installer) names {data['binary']} with nothing "
                "to prove it is still the terraform its bundle signed; nothing was run",
                ["give the bundle again, which checks its signature and remembers its terraform "
                 "with the signed hashes: `installer plan -i INVENTORY --bundle BUNDLE`",
                 "or name a terraform you trust: INSTALLER_TERRAFORM=/path/to/terraform"],
            )
        mirror, root = data.get("plugin_mirror"), data.get("signed_root")
        return TerraformTools(
            data["binary"], Path(mirror) if mirror else None, Path(root) if root else None, data.get("signed") or {}
        )
    return TerraformTools("terraform", None)


def remember(workdir: Path, tools: TerraformTools) -> None:
    mirror = str(tools.plugin_mirror) if tools.plugin_mirror else None
    root = str(tools.signed_root) if tools.signed_root else None
    (workdir / "tools.json").write_text(json.dumps(
        {"binary": tools.binary, "plugin_mirror": mirror, "signed_root": root, "signed": tools.signed}
    ))


def check_signed(tools: TerraformTools) -> None:
    """Refuse, before it runs, a bundle's terraform whose folder is no longer exactly what the
    bundle signed: a file changed, missing or added, or a link (which could point anywhere)."""
    root = tools.signed_root
    if root is None:
        return
    found: dict[str, Path] = {}
    problems: list[str] = []
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder, name)
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                problems.append(f"{rel}: a link")
            elif name in files:
                found[rel] = path
    if not root.is_dir():
        problems.append(f"{root}: no such folder")
    problems += [f"{rel}: missing" for rel in sorted(set(tools.signed) - set(found))]
    problems += [f"{rel}: not in the bundle" for rel in sorted(set(found) - set(tools.signed))]
    shared = [found[rel] for rel in sorted(set(found) & set(tools.signed))]
    digests = sha256_files(shared)
    problems += [f"{p.relative_to(root).as_posix()}: changed" for p in shared
                 if digests[p] != tools.signed[p.relative_to(root).as_posix()]]
    if problems:
        raise TerraformError(
            f"the terraform in {root} is no longer what its bundle signed; nothing was run",
            [*problems[:10], *([f"... and {len(problems) - 10} more"] if len(problems) > 10 else []),
             "give the bundle again (its signature is checked first): "
             "`installer plan -i INVENTORY --bundle BUNDLE`"],
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
    check_signed(tools)
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
