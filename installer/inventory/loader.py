"""Load an inventory YAML file into an `Inventory`, with every error pointing at file:line.

PyYAML gives positions only on the node graph, so we compose the graph once, record the line
of every key path, then validate the plain data with pydantic and map each error's `loc` back
to the nearest recorded line.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from installer.base.errors import InventoryError
from installer.inventory import engine_flags, fanout_ports, profile_checks, redis_ha
from installer.inventory.hosts import duplicate_hosts
from installer.inventory.models import MODEL_FORM, Inventory
from installer.inventory.source import Loc, Source, dotted

_FIXES = {
    "extra_forbidden": "remove it or check its spelling",
    "missing": "add it",
    "literal_error": "use one of the allowed values",
    "int_parsing": "write a whole number",
    "int_type": "write a whole number",
    "float_parsing": "write a number",
    "float_type": "write a number",
    "finite_number": "write a number",
    "bool_type": "write true or false",
    "string_type": "write a string",
    "list_type": "write a list (`- item` lines or `[a, b]`)",
    "greater_than_equal": "raise it",
    "less_than_equal": "lower it",
    "greater_than": "raise it",
    "string_pattern_mismatch": "use lowercase letters, digits and '-'",
    "too_short": "add at least one entry",
}


_PUBLIC_KEY_TYPES = ("ssh-ed25519 ", "ssh-rsa ", "ecdsa-sha2-nistp")


def _walk(node: yaml.Node, loc: Loc, lines: dict[Loc, int], dups: list[str], src: str) -> None:
    lines[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                dups.append(
                    f"{src}:{key_node.start_mark.line + 1}: {dotted((*loc, key))}: duplicate key "
                    f"(first at line {seen[key]}); keep one of them"
                )
            seen[key] = key_node.start_mark.line + 1
            lines[(*loc, key)] = key_node.start_mark.line + 1
            _walk(value_node, (*loc, key), lines, dups, src)
            lines[(*loc, key)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*loc, i), lines, dups, src)


def _clean_loc(loc: tuple[Any, ...]) -> Loc:
    # pydantic inserts validator names such as "function-after[...]" for model validators.
    return tuple(p for p in loc if not (isinstance(p, str) and "[" in p))


def parse(text: str, src: str) -> tuple[dict[str, Any], dict[Loc, int]]:
    """Parse YAML text into data plus a key-path -> line map; raise InventoryError on bad YAML."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        problem = exc.problem or str(exc)
        raise InventoryError(
            f"{src}:{line}: not valid YAML: {problem}",
            ["check indentation and quoting on that line (or the line before it)"],
        ) from exc
    except RecursionError:
        raise InventoryError(
            f"{src}:1: not an inventory: its lists or mappings are nested too deeply to read"
        ) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow, such as NUL
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        line = text.count("\n", 0, exc.position) + 1
        raise InventoryError(
            f"{src}:{line}: not valid YAML: the control character U+{ord(char):04X} is not "
            "allowed; remove it (is this the inventory file?)"
        ) from exc
    if root is None or not isinstance(data, dict):
        raise InventoryError(f"{src}:1: the inventory must be a YAML mapping (key: value lines)")
    lines: dict[Loc, int] = {}
    dups: list[str] = []
    _walk(root, (), lines, dups, src)
    if dups:
        raise InventoryError(f"{src}: {len(dups)} duplicate key(s)", dups)
    return data, lines


def _errors(exc: ValidationError, source: Source) -> Iterator[str]:
    for err in exc.errors():
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        fix = _FIXES.get(err["type"])
        # A check across entries (models.py) says itself which setting is wrong.
        loc = err.get("ctx", {}).get("loc", err["loc"])
        yield f"{source.at(_clean_loc(loc))}: {msg}" + (f" ({fix})" if fix else "")


def _resolve(data: dict[str, Any], base: Path) -> None:
    """Make relative file paths relative to the inventory file, as a user reading it expects."""

    def fix(section: dict[str, Any] | None, key: str) -> None:
        if isinstance(section, dict) and isinstance(section.get(key), str):
            section[key] = str((base / Path(section[key]).expanduser()).resolve())

    models = [data.get("model"), *(data["models"] if isinstance(data.get("models"), list) else [])]
    for entry in models:
        fix(entry, "path")
        source = entry.get("source") if isinstance(entry, dict) else None
        fix(source, "manifest")  # model.source's signed list and mirror token (weights_source.py)
        fix(source, "token_file")
    fix(data.get("ssh"), "private_key")
    fix(data.get("ssh"), "known_hosts")
    fix(data.get("cloud"), "ssh_public_key")
    fix(data.get("gpu"), "packages_dir")
    fix(data.get("monitoring"), "tarballs_dir")
    os_section = data.get("os")
    if isinstance(os_section, dict) and isinstance(os_section.get("packages_dirs"), dict):
        for name in list(os_section["packages_dirs"]):
            fix(os_section["packages_dirs"], name)
    for host in data.get("hosts") or []:
        if isinstance(host, dict):
            fix(host.get("ssh"), "private_key")
    auth = data.get("auth")
    jwt = auth.get("jwt") if isinstance(auth, dict) else None
    fix(jwt, "jwks_file")
    fix(jwt, "jwks_ca")
    tls = data.get("tls")
    fix(tls, "ca")
    if isinstance(tls, dict) and isinstance(tls.get("certificates"), dict):
        for given in tls["certificates"].values():
            fix(given, "cert")
            fix(given, "key")


def _check_consistency(inv: Inventory) -> Iterator[str]:
    for attr, value, first, dup in duplicate_hosts(inv.hosts):
        yield (
            f"{inv.where('hosts', dup, attr)}: duplicate {attr} {value!r} (also hosts[{first}], "
            f"line {inv.line('hosts', first, attr)}); every host needs its own {attr}"
        )
    weights: list[tuple[Loc, Path]] = (
        [(("model", "path"), inv.model.path)] if inv.models is None
        else [(("models", i, "path"), m.path) for i, m in enumerate(inv.models)]
    )
    for loc, model_dir in weights:
        if not model_dir.is_dir():
            yield (
                f"{inv.where(*loc)}: {model_dir} is not a "
                "directory; point it at the local weights directory (the one with config.json)"
            )
        elif not (model_dir / "config.json").is_file():
            yield (
                f"{inv.where(*loc)}: {model_dir} has no "
                "config.json; point it at a Hugging Face-style weights directory"
            )
    keys: list[tuple[Loc, Path | None]] = [
        (("ssh", "private_key"), inv.ssh.private_key),
        (("ssh", "known_hosts"), inv.ssh.known_hosts),
    ]
    keys += [(("hosts", i, "ssh", "private_key"), h.ssh.private_key) for i, h in enumerate(inv.hosts)]
    for loc, path in keys:
        if path is not None and not path.is_file():
            yield f"{inv.where(*loc)}: {path} does not exist; fix the path"
    if inv.cloud is not None:
        yield from _check_public_key(inv.cloud.ssh_public_key, inv.where("cloud", "ssh_public_key"))
    yield from _check_extra_args(inv)
    # the models' serving profiles against their checkpoints and the bundled vLLM's names
    for loc, problem in profile_checks.problems(inv):
        yield f"{inv.where(*loc)}: {problem}"
    # redis.replicas against the hosts: a replica and a Sentinel quorum need hosts to put them on
    for loc, problem in redis_ha.problems(inv):
        yield f"{inv.where(*loc)}: {problem}"
    # the weights fan-out's fixed port against the other listeners on its hosts
    for loc, problem in fanout_ports.problems(inv):
        yield f"{inv.where(*loc)}: {problem}"


def _check_extra_args(inv: Inventory) -> Iterator[str]:
    """extra_args items, top level and each model's, that vLLM would read as a flag the installer
    writes itself (engine_flags). Here, not in the model, so a revision recorded before this
    check still loads for a rollback; every inventory file a user gives passes through here."""
    # the top-level engine as written (with models:, inv.engine is the primary's merge)
    sections: list[tuple[Loc, list[str]]] = [(("engine",), (inv._engine_defaults or inv.engine).extra_args)]
    sections += [(("models", i, "engine"), m.engine.extra_args or []) for i, m in enumerate(inv.models or [])]
    for loc, items in sections:
        for j, item in enumerate(items):
            problem = engine_flags.problem(item)
            if problem is not None:
                yield f"{inv.where(*loc, 'extra_args', j)}: {problem}"


def _check_public_key(path: Path, where: str) -> Iterator[str]:
    try:
        first = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        yield f"{where}: cannot read {path} ({exc.__class__.__name__}); point it at your .pub file"
        return
    if not first.startswith(_PUBLIC_KEY_TYPES) or len(first.split()) < 2:
        yield f"{where}: {path} is not an OpenSSH public key; point it at the .pub file"


def load_inventory(path: Path | str) -> Inventory:
    """Read and validate an inventory file; raise InventoryError listing every problem with file:line."""
    path = Path(path)
    src = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InventoryError(f"cannot read inventory {src}: {exc.strerror}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InventoryError(
            f"{src}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); "
            "save the inventory as UTF-8 YAML (is this the inventory file?)"
        ) from None
    data, lines = parse(text, src)
    if "model" in data and data.get("models") is not None:
        raise InventoryError(
            f"{src}:{lines[('models',)]}: models: {MODEL_FORM[True]}", [f"model: is at line {lines[('model',)]}"]
        )
    _resolve(data, path.resolve().parent)
    source = Source(src, lines)
    try:
        inv = Inventory.model_validate(data)
    except ValidationError as exc:
        problems = list(_errors(exc, source))
        raise InventoryError(f"{src}: {len(problems)} problem(s) in the inventory", problems) from exc
    inv._source = source
    problems = list(_check_consistency(inv))
    if problems:
        raise InventoryError(f"{src}: {len(problems)} problem(s) in the inventory", problems)
    return inv
