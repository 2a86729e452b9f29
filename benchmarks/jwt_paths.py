"""The bearer-JWT paths of benchmarks/gateway_overhead.py (`--jwt`, #38): the same gateway with an
auth.jwt section, called with a JWT instead of an API key, one path per algorithm, so that what
a token's check costs shows against `gateway` (API keys) in the same rounds.

Each path gets its own signing key, made here, its JWKS file, and one token valid for the run:
every request is checked in full (size, header, alg, kid, signature, claims), as the gateway
caches no verdict.

Run alone (`.venv/bin/python benchmarks/jwt_paths.py`), it times the check itself in one process,
without HTTP: KeyRing.identify with an API key against the same with each algorithm's token,
alternating, median over rounds; the results go to benchmarks/results/jwt_verify-<date>.json.
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from joserfc import jwt
from joserfc.errors import SecurityWarning
from joserfc.jwk import ECKey, Key, OKPKey, RSAKey

ISSUER = "https://idp.bench.internal/realms/llm"
AUDIENCE = "private-llm"
ALGORITHMS = ("RS256", "ES256", "EdDSA")


def _key(alg: str) -> Key:
    if alg == "RS256":
        return RSAKey.generate_key(2048)  # the IdPs' usual default size
    if alg == "ES256":
        return ECKey.generate_key("P-256")
    return OKPKey.generate_key("Ed25519")


def setups(work: Path, algorithms: tuple[str, ...] = ALGORITHMS) -> list[tuple[str, dict[str, Any], str]]:
    """(path name, the gateway's extra settings, the bearer token) per algorithm."""
    found = []
    for alg in algorithms:
        key = _key(alg)
        kid = f"bench-{alg.lower()}"
        jwks = work / f"jwks-{alg.lower()}.json"
        jwks.write_text(json.dumps({"keys": [{**key.as_dict(private=False), "kid": kid, "alg": alg, "use": "sig"}]}))
        now = int(time.time())
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "bench@example.internal", "iat": now, "exp": now + 6 * 3600}
        with warnings.catch_warnings():  # joserfc's note that RFC 9864 prefers "Ed25519" to "EdDSA"
            warnings.simplefilter("ignore", SecurityWarning)
            token = jwt.encode({"alg": alg, "kid": kid}, claims, key, algorithms=[alg])
        extra = {"jwt": {"issuers": [ISSUER], "audiences": [AUDIENCE], "jwks_file": str(jwks)}}
        found.append((f"gateway-jwt-{alg.lower()}", extra, token))
    return found


async def _time(identify: Any, bearer: str, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await identify(bearer)
    return (time.perf_counter() - start) / n * 1e6


async def _rounds(rounds: int, n: int) -> dict[str, list[float]]:
    from installer.secrets import keys
    from service.auth import KeyRing, jwt_verifier
    from service.config import JWTConfig

    work = Path(tempfile.mkdtemp(prefix="pli-jwt-"))
    _, secret = keys.create("bench", path=work / "keys.json")
    keys.write_hosts_file(work / "keys.hosts.json", keys.load(work / "keys.json"))
    paths = [("api-key", KeyRing(work / "keys.hosts.json"), secret)]
    for name, extra, token in setups(work):
        paths.append((name, KeyRing(work / "keys.hosts.json", jwt_verifier(JWTConfig(**extra["jwt"]))), token))
    found: dict[str, list[float]] = {name: [] for name, _, _ in paths}
    for r in range(rounds):
        for name, ring, bearer in paths[r % len(paths):] + paths[: r % len(paths)]:
            found[name].append(await _time(ring.identify, f"Bearer {bearer}", n))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--checks", type=int, default=2000, help="per path, per round")
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / time.strftime(
        "jwt_verify-%Y%m%d-%H%M.json"))
    args = parser.parse_args()
    found = asyncio.run(_rounds(args.rounds, args.checks))
    base = statistics.median(found["api-key"])
    summary = {
        name: {"median_us": statistics.median(v), "min_us": min(v), "max_us": max(v),
               "x_api_key": statistics.median(v) / base}
        for name, v in found.items()
    }
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "cores": os.cpu_count(), "rounds": args.rounds,
            "checks": args.checks, "load_average_at_end": os.getloadavg()}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"meta": meta, "summary": summary, "rounds": found}, indent=2) + "\n")
    lines = ["| path | one check, median (min-max) | x API key |", "|---|---|---|"]
    lines += [f"| {n} | {e['median_us']:.1f} us ({e['min_us']:.1f}-{e['max_us']:.1f}) | {e['x_api_key']:.0f} |"
              for n, e in summary.items()]
    args.output.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
