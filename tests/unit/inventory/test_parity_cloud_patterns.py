"""The cloud-name formats exist twice on purpose: in the inventory models (checked before any
API call, with the inventory's file:line) and in the Terraform modules' variable validations
(so a module used on its own refuses the same values). For a table of valid and invalid values
per format, both sides must agree.

The Python side is the real pydantic validation of the inventory models. The Terraform side is
each variable's own `validation.condition`, read from variables.tf with the variable replaced by
the value, evaluated by the real terraform (RE2 semantics) in one `terraform console` call.

Zones: the inventory checks a zone against its region, Terraform only its shape; so the zones
here are built from every region the inventory knows, and each must be judged alike."""

import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import hcl2
import pytest
from pydantic import ValidationError

from installer.base.errors import InventoryError
from installer.inventory import load_inventory
from installer.inventory.cloud import CLOUD_MODELS
from installer.inventory.models import Inventory
from tests.support import REPO

MODULES = REPO / "terraform" / "modules"
# inventory field -> the module variable it becomes (installer/terraform/tfvars.py)
VARIABLES = {"zone": "zone", "instance_type": "instance_type", "image": "image_id", "deployment": "name_prefix"}
BASE: dict[str, dict[str, Any]] = {
    "aws": {"region": "us-east-1", "zone": "us-east-1a", "instance_type": "g5.xlarge", "image": "ami-12345678"},
    "tencentcloud": {
        "region": "ap-guangzhou", "zone": "ap-guangzhou-6", "instance_type": "GN7.2XLARGE32", "image": "img-487zeit5"
    },
    "jdcloud": {
        "region": "cn-north-1", "zone": "cn-north-1a", "instance_type": "g.n2.xlarge", "image": "img-m5s0tb1jgo"
    },
}
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk0cGzTuJ8mWcR0x4dXb6j1dP2E4tqG0Zl2iNQ3cF7t test"
UUID = "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"
# (valid, invalid) per provider and field; a trailing newline checks that both anchor at the very end.
TABLE: dict[str, dict[str, tuple[list[str], list[str]]]] = {
    "aws": {
        "instance_type": (
            ["g5.xlarge", "p5.48xlarge", "t3.micro", "t2.nano", "m7i-flex.large", "c6gn.metal",
             "c7i.metal-24xl", "u-6tb1.112xlarge", "g6e.2xlarge", "r6i.medium", "x2.small"],
            ["G5.xlarge", "g5", "g5.", ".xlarge", "g5.huge", "g5.xlarge\n", " g5.xlarge", "g5.metal-24",
             "g5_xlarge", "5g.xlarge", "g5.xlarge.x", "g5.metal-xl", ""],
        ),
        "image": (
            ["ami-12345678", "ami-0123456789abcdef0", "ami-abcdef0123"],
            ["ami-1234567", "ami-0123456789abcdef01", "ami-ABCDEF12", "ami-", "img-12345678", " ami-12345678",
             "ami-12345678\n", "ami-1234567g", ""],
        ),
    },
    "tencentcloud": {
        "instance_type": (
            ["GN7.2XLARGE32", "S5.MEDIUM4", "GT4.41XLARGE948", "PNV4.7XLARGE116", "SA2.LARGE8",
             "GN10Xp.2XLARGE40", "S5.SMALL", "M6.8XLARGE"],
            ["gn7.2xlarge32", "GN7", "GN7.", "GN7.2xlarge32", "GN7-2XLARGE32", "GN7.2XLARGE32.", "7GN.LARGE",
             "GN7.2XLARGE32\n", "GN7.32", ""],
        ),
        "image": (
            ["img-487zeit5", "img-abcdefgh", "img-12345678"],
            ["img-487zeit", "img-487zeit55", "img-487ZEIT5", "ami-12345678", "img-487zeit5\n", "img_487zeit5", ""],
        ),
    },
    "jdcloud": {
        "instance_type": (
            ["g.n2.xlarge", "c.c1.large", "gn.v100.8xlarge", "p.n4.16xlarge"],
            ["G.n2.xlarge", "g.n2", "g.n2.xlarge.x", "g..xlarge", "g.n2.x-large", "g.n2.xlarge\n", "", "g.N2.xlarge"],
        ),
        "image": (
            ["img-m5s0tb1jgo", "img-a", UUID],
            [UUID.upper(), UUID[:-1], UUID + "0", "img-", "img-M5", f"img-a|{UUID}", f"img-a{UUID}",
             "img-m5s0tb1jgo\n", ""],
        ),
    },
}
NAMES = (
    ["a", "gpu-demo", "0", "prod-a-1", "a" * 40, "a" + "-" * 38 + "b"],
    ["a" * 41, "a" * 63, "-a", "a-", "A", "gpu_demo", "gpu.demo", "gpu-demo\n", ""],
)


def _zones(provider: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(region, zone) pairs: zones of every region the inventory knows, and malformed ones."""
    regions = sorted(CLOUD_MODELS[provider].REGIONS)
    if provider == "tencentcloud":
        valid = [z for r in regions for z in ((r, f"{r}-1"), (r, f"{r}-10"))]
        invalid = [z for r in regions for z in ((r, r), (r, f"{r}-"), (r, f"{r}-a"), (r, f"{r}1"), (r, f"{r}-1\n"))]
    else:
        valid = [z for r in regions for z in ((r, f"{r}a"), (r, f"{r}f"))]
        invalid = [z for r in regions for z in ((r, r), (r, f"{r}aa"), (r, f"{r}-a"), (r, f"{r}1"), (r, f"{r}A"))]
    return valid, invalid


def _cases() -> list[tuple[str, str, str, str, bool]]:
    """(provider, field, region, value, valid) for every value of the table."""
    cases = []
    for provider, fields in TABLE.items():
        region = BASE[provider]["region"]
        for field, (valid, invalid) in fields.items():
            cases += [(provider, field, region, v, True) for v in valid]
            cases += [(provider, field, region, v, False) for v in invalid]
        valid_zones, invalid_zones = _zones(provider)
        cases += [(provider, "zone", r, z, True) for r, z in valid_zones]
        cases += [(provider, "zone", r, z, False) for r, z in invalid_zones]
        cases += [(provider, "deployment", region, n, True) for n in NAMES[0]]
        cases += [(provider, "deployment", region, n, False) for n in NAMES[1]]
    return cases


def python_accepts(provider: str, field: str, region: str, value: str) -> bool:
    """Whether the inventory models accept `value` for `field` (errors elsewhere do not count)."""
    cloud = {**BASE[provider], "allowed_cidrs": ["10.0.0.0/8"], "ssh_public_key": "/k.pub"}
    if field == "deployment":
        data: dict[str, Any] = {"deployment": value, "provider": provider, "cloud": cloud}
        try:
            Inventory.model_validate(data)
        except ValidationError as exc:
            return not any(err["loc"][:1] in (("deployment",), ("cloud",)) for err in exc.errors())
        return True
    try:
        CLOUD_MODELS[provider].model_validate({**cloud, "region": region, field: value})
    except ValidationError as exc:
        return not any(err["loc"][:1] == (field,) for err in exc.errors())
    return True


@functools.cache
def _condition(provider: str, variable: str) -> str:
    """The variable's validation condition as written in the module (the one that reads it alone)."""
    for tf in sorted((MODULES / provider).glob("*.tf")):
        with tf.open() as fh:
            for block in hcl2.load(fh).get("variable", []):
                for name, body in block.items():
                    if name.strip('"') != variable:
                        continue
                    conditions = [v["condition"] for v in body.get("validation", [])]
                    found = [c for c in conditions if re.search(rf"\bvar\.{variable}\b", c)]
                    assert len(found) == 1, f"{provider}/{tf.name}: {variable} has {len(found)} conditions"
                    expression = found[0]
                    assert expression.startswith("${") and expression.endswith("}"), expression
                    return expression[2:-1]
    raise AssertionError(f"terraform/modules/{provider} has no variable {variable!r}")


def _hcl_string(value: str) -> str:
    # JSON's escapes are HCL's; a template sequence would be interpreted, so none may appear.
    assert "${" not in value and "%{" not in value, value
    return json.dumps(value)


def terraform_accepts(cases: list[tuple[str, str, str, str, bool]], workdir: Path) -> list[bool]:
    """Evaluate every case's condition with the real terraform, in one call."""
    terraform = shutil.which("terraform")
    if terraform is None:
        pytest.fail("terraform is not on PATH: put HashiCorp's terraform >= 1.9 binary in /usr/local/bin")
    expressions = []
    for provider, field, _region, value, _valid in cases:
        variable = VARIABLES[field]
        condition = _condition(provider, variable)
        expressions.append(_hcl_string(value).join(re.split(rf"\bvar\.{variable}\b", condition)))
    env = {**os.environ, "TF_CLI_CONFIG_FILE": os.devnull, "TF_IN_AUTOMATION": "1"}
    proc = subprocess.run(
        [terraform, "console"], input=f"jsonencode([{', '.join(expressions)}])\n",
        cwd=workdir, env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert len(results) == len(cases)
    return [bool(r) for r in results]


def test_inventory_and_terraform_agree_on_every_cloud_name(tmp_path: Path) -> None:
    cases = _cases()
    terraform = terraform_accepts(cases, tmp_path)
    disagreements = []
    for (provider, field, region, value, valid), tf in zip(cases, terraform, strict=True):
        py = python_accepts(provider, field, region, value)
        if py != tf or py != valid:
            disagreements.append(
                f"{provider} {field}={value!r} (region {region}): inventory {'accepts' if py else 'refuses'}, "
                f"terraform {VARIABLES[field]} {'accepts' if tf else 'refuses'}, expected "
                f"{'valid' if valid else 'invalid'}"
            )
    assert not disagreements, "\n".join(disagreements)
    # Every provider, field and both verdicts were exercised.
    seen = {(p, f, v) for p, f, _r, _value, v in cases}
    assert seen == {(p, f, v) for p in CLOUD_MODELS for f in VARIABLES for v in (True, False)}


def test_a_deployment_name_too_long_for_the_cloud_modules_is_refused_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    (tmp_path / "id.pub").write_text(PUBLIC_KEY + "\n")
    text = (REPO / "tests/unit/fixtures/terraform/aws.yml").read_text()
    name = "gpu-demo-" + "x" * 32  # 41 characters: a host name, but longer than name_prefix allows
    path = tmp_path / "inventory.yml"
    path.write_text(text.replace("gpu-demo", name).replace("MODEL", "weights").replace("KEY", "id.pub"))
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    (problem,) = info.value.details
    assert problem.startswith(f"{path}:6: cloud: ")  # the cloud section that makes it a prefix
    assert f"shorten deployment {name!r} (41)" in problem and "at most 40" in problem
