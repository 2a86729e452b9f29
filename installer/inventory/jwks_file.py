"""auth.jwt's key files: the JWKS file must hold a public signing key the gateways can use, and
the CA bundle for a JWKS URL must be a readable PEM file. `validate` and `up` refuse otherwise,
with the file and line of the setting; render pushes the checked set's usable keys only.

A JWKS file with private-key material is refused, not stripped: the file is copied to every
gateway host and into the run directory, and an IdP's private signing key found in it has already
left the IdP; the operator must see that (and rotate that key), not have it silently dropped.
A set fetched from a URL is the IdP's to fix: the gateway leaves such keys out and logs it.
"""

from collections.abc import Iterator

from installer.inventory.auth import JWTAuth
from installer.inventory.models import Inventory
from installer.inventory.source import Loc
from service import jwks

_LOC: Loc = ("auth", "jwt")


def _read(jwt: JWTAuth) -> tuple[jwks.Checked | None, str | None]:
    path = jwt.jwks_file
    assert path is not None
    try:
        checked = jwks.check(jwks.parse(path.read_bytes()), tuple(jwt.algorithms))
    except FileNotFoundError:
        return None, f"{path} does not exist; fix the path"
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror}"
    except ValueError as exc:  # JSON or JWKS shape
        return None, f"{path} is not a usable JWKS: {exc}"
    if checked.private:
        return None, (
            f"{path} holds private-key material ({', '.join(checked.private)}); a JWKS for the gateways "
            "has public keys only: export the IdP's public JWKS (and treat that private key as leaked)"
        )
    if not checked.keys:
        left = "; ".join(checked.left_out) or "it lists no keys"
        return None, f"{path} has no key the gateways can verify tokens with ({left})"
    return checked, None


def check(inv: Inventory) -> Iterator[tuple[Loc, str]]:
    jwt = inv.auth.jwt
    if jwt is None:
        return
    if jwt.jwks_file is not None:
        _, problem = _read(jwt)
        if problem:
            yield (*_LOC, "jwks_file"), problem
    if jwt.jwks_ca is not None:
        try:
            pem = jwt.jwks_ca.read_bytes()
        except OSError as exc:
            yield (*_LOC, "jwks_ca"), f"cannot read {jwt.jwks_ca}: {exc.strerror}; fix the path"
        else:
            if b"-----BEGIN CERTIFICATE-----" not in pem:
                yield (*_LOC, "jwks_ca"), f"{jwt.jwks_ca} holds no PEM certificate"


def public_document(inv: Inventory) -> str:
    """The hosts' jwks.json: the file's usable public keys only ("" without a JWKS file)."""
    jwt = inv.auth.jwt
    if jwt is None or jwt.jwks_file is None:
        return ""
    checked, problem = _read(jwt)
    if checked is None:
        raise ValueError(f"{inv.where(*_LOC, 'jwks_file')}: {problem}")
    return jwks.public_document(checked)
