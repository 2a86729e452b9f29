"""Which keys of a JWKS a gateway may verify tokens with: the one rule both the control machine
(`installer validate`, on a JWKS file) and the gateway (on a JWKS fetched from a URL) apply.

Standard library only, so the control machine checks a file without the gateway's JOSE library.
A key is usable when it is a public signing key for an allowed algorithm, with a kid (a token
names its key by kid; a rotation adds one). Anything else is left out with a reason.
"""

import json
from dataclasses import dataclass
from typing import Any

# Asymmetric only: `none` and the HMAC algorithms are never accepted (an HS256 token "signed"
# with the public key is the classic confusion attack; a shared secret has no place in a JWKS
# pushed to every host).
ALGORITHMS = ("RS256", "ES256", "EdDSA")
_KTY = {"RS256": "RSA", "ES256": "EC", "EdDSA": "OKP"}
_CURVE = {"ES256": "P-256", "EdDSA": "Ed25519"}
# Members that only a private (or symmetric) key has (RFC 7518 6.2.2, 6.3.2, 6.4; RFC 8037 2).
PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
MIN_RSA_BITS = 2048
MAX_KEYS = 64  # an IdP publishes a handful; a set this large is a mistake or an attack
MAX_JWKS_BYTES = 256 * 1024


@dataclass(frozen=True)
class Checked:
    keys: tuple[dict[str, Any], ...]  # usable, each with its kid
    left_out: tuple[str, ...]  # one line per key not usable: which and why
    private: tuple[str, ...]  # kids (or positions) of keys that carry private material


def _b64len(value: Any) -> int:
    return len(value) * 6 // 8 if isinstance(value, str) else 0


def _problem(key: Any, allowed: tuple[str, ...]) -> str | None:
    if not isinstance(key, dict):
        return "not a JSON object"
    kty = key.get("kty")
    algs = [a for a in allowed if _KTY[a] == kty]
    if not algs:
        return f"kty {kty!r} signs none of the allowed algorithms {', '.join(allowed)}"
    if not isinstance(key.get("kid"), str) or not key["kid"]:
        return "no kid (tokens choose their key by kid)"
    if key.get("use", "sig") != "sig":
        return f"use {key.get('use')!r} is not sig"
    ops = key.get("key_ops")
    if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
        return f"key_ops {ops!r} does not include verify"
    alg = key.get("alg")
    if alg is not None and alg not in algs:
        return f"alg {alg!r} is not one of the allowed {', '.join(algs)} for kty {kty}"
    if kty == "RSA":
        if _b64len(key.get("n")) * 8 < MIN_RSA_BITS - 8 or not isinstance(key.get("e"), str):
            return f"an RSA key needs n of at least {MIN_RSA_BITS} bits and e"
    else:
        want = [_CURVE[a] for a in algs if alg in (None, a)]
        if key.get("crv") not in want:
            return f"crv {key.get('crv')!r} is not {' or '.join(want)}"
        if not isinstance(key.get("x"), str) or (kty == "EC" and not isinstance(key.get("y"), str)):
            return "missing x (and y for EC)"
    return None


def check(doc: Any, allowed: tuple[str, ...] = ALGORITHMS) -> Checked:
    """The usable public keys of a parsed JWKS. Raises ValueError when it is no JWKS at all,
    or has two keys with one kid (which one a token meant is then a guess)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise ValueError('not a JWKS: expected {"keys": [...]}')
    if len(doc["keys"]) > MAX_KEYS:
        raise ValueError(f"{len(doc['keys'])} keys; at most {MAX_KEYS}")
    keys: list[dict[str, Any]] = []
    left_out: list[str] = []
    private: list[str] = []
    for i, key in enumerate(doc["keys"]):
        name = f"key {i}" + (f" (kid {key.get('kid')!r})" if isinstance(key, dict) and "kid" in key else "")
        if isinstance(key, dict) and PRIVATE_MEMBERS & key.keys():
            private.append(name)
            continue
        why = _problem(key, allowed)
        if why is None:
            keys.append(key)
        else:
            left_out.append(f"{name}: {why}")
    kids = [k["kid"] for k in keys]
    dup = sorted({k for k in kids if kids.count(k) > 1})
    if dup:
        raise ValueError(f"two keys share the kid {dup[0]!r}")
    return Checked(tuple(keys), tuple(left_out), tuple(private))


def parse(raw: bytes) -> Any:
    if len(raw) > MAX_JWKS_BYTES:
        raise ValueError(f"{len(raw)} bytes; a JWKS is at most {MAX_JWKS_BYTES}")
    return json.loads(raw)


def public_document(checked: Checked) -> str:
    """The JWKS the hosts get: the usable keys only, sorted so its digest is stable."""
    return json.dumps({"keys": sorted(checked.keys, key=lambda k: k["kid"])}, sort_keys=True, indent=1) + "\n"
