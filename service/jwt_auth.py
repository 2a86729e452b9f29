"""Bearer JWTs from the organisation's identity provider, beside the gateway's API keys.

A token is checked with joserfc (README, "Library choice"): size first, then the header's alg
against the allow-list, the key by kid, the signature, and iss, aud, exp and nbf with the
configured clock skew. A refusal says only "invalid token" to the client; the reason goes to
the log, never the token. The subject becomes the caller's name for limits, usage and metrics
(`subject_name`), bounded and made of characters safe in a Redis key and a label.

Keys come from a JWKS file (carried to the hosts by the installer) or an https URL fetched with
the given CA file (or the system store), cached for `jwks_refresh_s`. A token naming a kid the
cache lacks makes the gateway fetch the set again at once, at most once per
`jwks_min_refresh_interval_s`: a rotation is picked up on its first token, and a stream of
made-up kids costs at most one fetch per interval.
"""

import asyncio
import hashlib
import json
import logging
import re
import ssl
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
from joserfc import jws, jwt
from joserfc.errors import JoseError, SecurityWarning
from joserfc.jwk import Key, import_key

from service import jwks

if TYPE_CHECKING:
    from service.config import JWTConfig

log = logging.getLogger("service.jwt_auth")

# RFC 9864 prefers the algorithm names Ed25519/Ed448 to "EdDSA", and joserfc warns on every use;
# identity providers still sign as "EdDSA", which the inventory allows by name.
warnings.filterwarnings("ignore", message="EdDSA is deprecated", category=SecurityWarning)

# Three base64url parts: what a JWS compact token looks like. API keys are one plain string.
_SHAPE = re.compile(rb"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$")
_UNSAFE = re.compile(r"[^a-z0-9_.@-]+")
# '/' is never in an API key's name (KEY_NAME_PATTERN), so a token's caller and a key never share
# one; not ':', which separates the key from the model in usage's Redis fields (service/usage.py).
SUBJECT_PREFIX = "jwt/"


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and _SHAPE.match(token.encode()) is not None


def subject_name(issuer: str, subject: str) -> str:
    """The caller's name: readable where the subject is plain, never longer than 64 characters,
    distinct per (issuer, subject) through a digest of both, and without ':'."""
    digest = hashlib.sha256(f"{issuer}\0{subject}".encode()).hexdigest()[:12]
    readable = _UNSAFE.sub("_", subject.lower())[:40].strip("_.")
    return f"{SUBJECT_PREFIX}{readable}.{digest}" if readable else f"{SUBJECT_PREFIX}{digest}"


class Invalid(Exception):
    """Why a token was refused: logged, never sent to the client."""


class RefusalLog:
    """One log line per refused token, at most `per_second` a second: a client sending bad tokens
    in a loop cannot flood the log; the lines held back are counted in the next one."""

    def __init__(self, per_second: int = 20) -> None:
        self.per_second = per_second
        self._second = 0
        self._lines = 0
        self._held = 0

    def refused(self, reason: str) -> None:
        now = int(time.monotonic())
        if now != self._second:
            self._second, self._lines = now, 0
        if self._lines >= self.per_second:
            self._held += 1
            return
        self._lines += 1
        held, self._held = self._held, 0
        log.warning("refused a bearer JWT: %s%s", reason, f" ({held} more refused, not logged)" if held else "")


class KeySource:
    """The verifying keys by kid, from a file or a URL; `refresh` replaces them when the set
    parses and has a usable key, and keeps the previous ones otherwise."""

    def __init__(self, cfg: "JWTConfig") -> None:
        self.cfg = cfg
        self.keys: dict[str, Key] = {}
        self.loaded_at = 0.0  # monotonic; 0: never
        self._tried_at = -1e9
        self._lock = asyncio.Lock()
        self._ssl: ssl.SSLContext | None = None
        if cfg.jwks_file is not None:  # a missing or bad file fails start-up, loudly
            self._install(cfg.jwks_file.read_bytes(), str(cfg.jwks_file))

    def _install(self, raw: bytes, where: str) -> None:
        checked = jwks.check(jwks.parse(raw), tuple(self.cfg.algorithms))
        for line in checked.left_out:
            log.warning("JWKS %s: left out %s", where, line)
        if checked.private:
            # A set served by the IdP may hold private parts by mistake: never used, said loudly.
            log.error("JWKS %s: left out keys with private material: %s", where, ", ".join(checked.private))
        keys = {}
        for k in checked.keys:
            # jwks.check is the shape validate applies; joserfc may still refuse a key it passed
            # (key_ops, x5c): that key is left out, not the whole set.
            try:
                keys[k["kid"]] = import_key(k)
            except (JoseError, ValueError, TypeError) as exc:
                log.warning("JWKS %s: left out %s: %s", where, k["kid"], type(exc).__name__)
        if not keys:
            raise ValueError(f"JWKS {where} has no usable key")
        self.keys = keys
        self.loaded_at = time.monotonic()
        log.info("JWKS %s: %d keys (%s)", where, len(self.keys), ", ".join(sorted(self.keys)))

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            ca = self.cfg.jwks_ca_file
            self._ssl = ssl.create_default_context(cafile=str(ca) if ca else None)
        return self._ssl

    async def refresh(self, *, unknown_kid: bool = False) -> None:
        """Fetch the URL's set again (a file's set is re-read on change by `watch`). With
        `unknown_kid`, at most once per jwks_min_refresh_interval_s across all callers."""
        url = self.cfg.jwks_url
        if url is None:
            return
        async with self._lock:
            now = time.monotonic()
            if unknown_kid and now - self._tried_at < self.cfg.jwks_min_refresh_interval_s:
                return
            self._tried_at = now
            try:
                timeout = aiohttp.ClientTimeout(total=self.cfg.jwks_fetch_timeout_s)
                async with aiohttp.ClientSession(timeout=timeout) as session, session.get(
                    url, ssl=self._context(), allow_redirects=False
                ) as resp:
                    if resp.status != 200:
                        raise ValueError(f"HTTP {resp.status}")
                    raw = b""
                    async for chunk in resp.content.iter_chunked(64 * 1024):  # read() may return part
                        raw += chunk
                        if len(raw) > jwks.MAX_JWKS_BYTES:
                            raise ValueError(f"more than {jwks.MAX_JWKS_BYTES} bytes")
                self._install(raw, url)
            except (TimeoutError, OSError, ValueError, JoseError, aiohttp.ClientError) as exc:
                log.error("keeping the previous JWKS: cannot load %s: %s", url, exc)

    async def watch(self) -> None:
        """Keep the set fresh: the URL's every jwks_refresh_s, the file's when it changes."""
        cfg = self.cfg
        if cfg.jwks_url is not None:
            while True:
                if time.monotonic() - self.loaded_at >= cfg.jwks_refresh_s or not self.keys:
                    await self.refresh()
                await asyncio.sleep(min(cfg.jwks_refresh_s, cfg.jwks_min_refresh_interval_s))
        path = cfg.jwks_file
        assert path is not None
        stamp = _stamp(path)
        while True:
            await asyncio.sleep(1.0)
            now = _stamp(path)
            if now == stamp:
                continue
            stamp = now
            try:
                self._install(await asyncio.to_thread(path.read_bytes), str(path))
            except (OSError, ValueError, JoseError) as exc:
                log.error("keeping the previous JWKS: cannot load %s: %s", path, exc)


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size)


class Verifier:
    def __init__(self, cfg: "JWTConfig", source: KeySource | None = None) -> None:
        self.cfg = cfg
        self.source = source or KeySource(cfg)
        self.algorithms = tuple(cfg.algorithms)
        self.refusals = RefusalLog()
        # One registry for every token: its "now" is read at each validation.
        self._claims = jwt.JWTClaimsRegistry(
            leeway=int(cfg.clock_skew_s),
            iss={"essential": True, "values": list(cfg.issuers)},
            aud={"essential": True, "values": list(cfg.audiences)},
            exp={"essential": True},
            sub={"essential": True},
        )

    def claims_token(self, token: str) -> bool:
        """Whether a bearer is this verifier's to check: shaped like a JWT, or over the size cap
        (refused as a token before even its shape is looked at, never hashed as a key)."""
        return len(token) > self.cfg.max_token_bytes or looks_like_jwt(token)

    async def verify(self, token: str) -> tuple[str, str, float, dict[str, Any]]:
        """(issuer, subject, exp, claims) of a valid token; Invalid with the reason otherwise."""
        if len(token) > self.cfg.max_token_bytes:
            raise Invalid(f"token of {len(token)} bytes, above max_token_bytes {self.cfg.max_token_bytes}")
        try:
            # Parsed once: the same object's signature is checked below (jwt.decode would parse again).
            obj = jws.extract_compact(token.encode())
            header: Any = obj.headers()
        except (JoseError, ValueError, TypeError, AttributeError) as exc:
            raise Invalid(f"malformed token: {type(exc).__name__}") from None
        if not isinstance(header, dict):  # joserfc only asks that "alg" be in it: a string or list passes
            raise Invalid("malformed token: the header is not a JSON object")
        alg = header.get("alg")
        if alg not in self.algorithms:
            raise Invalid(f"alg {str(alg)[:16]!r} is not allowed")
        kid = header.get("kid")
        if not isinstance(kid, str) or len(kid) > 256:
            raise Invalid("no kid in the token's header")
        key = self.source.keys.get(kid)
        if key is None:
            await self.source.refresh(unknown_kid=True)
            key = self.source.keys.get(kid)
            if key is None:
                raise Invalid(f"unknown kid {kid[:64]!r}")
        try:
            if not jws.validate_compact(obj, key, algorithms=[alg]):
                raise Invalid("bad_signature")
            claims = json.loads(obj.payload or b"")
            if not isinstance(claims, dict):
                raise Invalid("the payload is not a JSON object")
            self._claims.validate(claims)
        except JoseError as exc:
            raise Invalid(f"{type(exc).__name__}: {exc.description or exc.error}") from None
        except (ValueError, TypeError) as exc:  # a key of another type than the alg's; bad JSON
            raise Invalid(f"{type(exc).__name__}") from None
        return str(claims["iss"]), str(claims["sub"]), float(claims["exp"]), claims
