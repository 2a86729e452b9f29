"""The gateway's JOSE library travels with the gateway's wheels (#38): air-gapped hosts verify
bearer JWTs with what the bundle carries."""

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from installer.bundle import planning


def test_the_gateway_wheels_carry_joserfc() -> None:
    reqs = {canonicalize_name(Requirement(r).name): Requirement(r) for r in planning.gateway_requirements()}
    assert "joserfc" in reqs
    # the verifier is written against 1.8's API (service/jwt_auth.py)
    assert reqs["joserfc"].specifier.contains("1.8.0") and not reqs["joserfc"].specifier.contains("1.9.0")
