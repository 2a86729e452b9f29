"""Runs ON A HOST (standard library only): describes what the roles manage there as one flat
JSON map, so the control machine can record it after a full configure and compare it on the
next `installer up` (installer/converged/fast_path.py). One SSH call per host, no Ansible.

Input: one JSON argument, the spec (which files, trees, links, units, packages and users).
Output: one JSON line, {"entries": {key: description}}. A key present on one side and not on
the other is drift too, so every description is a plain string that compares exactly.
"""

import glob
import hashlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable


def _owner(st: os.stat_result) -> str:
    return f"mode={stat.S_IMODE(st.st_mode):04o} owner={st.st_uid}:{st.st_gid}"


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _describe(path: str) -> str:
    """A file's content hash, mode and owner; a link's target; a directory's mode and owner."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return f"link -> {os.readlink(path)}"
    if stat.S_ISDIR(st.st_mode):
        return f"dir {_owner(st)}"
    if stat.S_ISREG(st.st_mode):
        return f"sha256={_sha256(path)} {_owner(st)}"
    return f"special {_owner(st)}"


def _stat(path: str) -> str:
    """A weights file without reading it: a copy or an edit changes its size, mtime, ctime or
    inode. ctime because mtime is the user's to set (`touch -r` after an in-place edit) and ctime
    is not: any write, chmod, chown, link or utime moves it to now. Nothing the installer does
    after the record moves it (deploy.up records after configure and the proof request), and
    reading the weights, as an engine does, leaves it alone."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return f"link -> {os.readlink(path)}"
    kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
    size = st.st_size if kind == "file" else 0
    return f"{kind} size={size} mtime={st.st_mtime_ns} ctime={st.st_ctime_ns} inode={st.st_ino} {_owner(st)}"


def _tree(entries: dict[str, str], kind: str, root: str, describe: Callable[[str], str]) -> None:
    """Every file under root as `kind:path`, described by `describe`; a missing root as absent."""
    if not os.path.lexists(root):
        entries[f"{kind}:{root}"] = "absent"
        return
    for path in _walk(root):
        entries[f"{kind}:{path}"] = describe(path)


def _walk(root: str) -> list[str]:
    found = [root]
    for top, dirs, files in os.walk(root):
        dirs.sort()
        found += [os.path.join(top, n) for n in sorted(dirs + files)]
    return found


def _stat_digest(root: str) -> str:
    """A large tree (a release's environments) by path, size, mode, owner, mtime and ctime: a
    venv of tens of thousands of files is too slow to hash on every run, and an edit changes its
    ctime even when its mtime is set back (_stat says why that is safe to record)."""
    h = hashlib.sha256()
    n = 0
    for path in _walk(root):
        h.update(_stat_line(path).encode())
        n += 1
    return f"{n} entries, {h.hexdigest()}"


def _stat_line(path: str) -> str:
    st = os.lstat(path)
    target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else ""
    fields = (path, st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, st.st_ctime_ns, target)
    return "\0".join(map(str, fields)) + "\n"


def _units(names: list[str], patterns: list[str]) -> dict[str, str]:
    listed = subprocess.run(
        ["systemctl", "list-unit-files", "--no-legend", "--plain", *patterns],
        capture_output=True, text=True, check=False,
    ).stdout.split()
    wanted = sorted({*names, *(w for w in listed if "." in w and not w.endswith((".target",)) and "@" not in w)})
    wanted = [w for w in wanted if any(w.endswith(s) for s in (".service", ".socket", ".timer"))]
    if not wanted:
        return {}
    props = "Id,LoadState,ActiveState,SubState,UnitFileState,NeedDaemonReload,FragmentPath,DropInPaths"
    out = subprocess.run(
        ["systemctl", "show", "-p", props, "--", *wanted], capture_output=True, text=True, check=False
    ).stdout
    found: dict[str, str] = {}
    for block in out.strip().split("\n\n"):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if fields.get("LoadState") in (None, "not-found"):
            continue  # a unit this host does not have: its absence is compared like any key
        found[f"unit:{fields['Id']}"] = " ".join(
            f"{k}={fields.get(k, '')}" for k in props.split(",")[2:]
        )
    return found


def _packages(names: list[str]) -> dict[str, str]:
    """Each package's version, install state and dpkg selection (hold): a released hold or a
    package apt moved is drift."""
    if not names:
        return {}
    out = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\t${db:Status-Want}\n", "--", *names],
        capture_output=True, text=True, check=False,
    ).stdout
    found = {}
    for line in out.splitlines():
        name, version, abbrev, want = [*line.split("\t"), "", "", ""][:4]
        if abbrev.strip() not in ("", "un", "pn"):  # not the names dpkg only knows of
            found[f"package:{name}"] = f"{version} {abbrev.strip()} {want}"
    return found


def _text(argv: list[str]) -> str:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError:
        return "absent"
    return " ".join(p.stdout.split()) if p.returncode == 0 else "absent"


def _host(users: list[str]) -> dict[str, str]:
    """What a GPU role or a reboot changes beside files: the running kernel, the loaded NVIDIA
    driver, the held packages and the service user's groups (the roles add it to video/render)."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            driver = " ".join(f.read().split())
    except OSError:
        driver = "absent"
    found = {
        "host:kernel": os.uname().release,
        "host:nvidia driver": driver,
        "host:apt holds": _text(["apt-mark", "showhold"]),
    }
    for name in users:
        found[f"groups:{name}"] = _text(["id", "-nG", name])
    return found


def _account(name: str) -> str:
    out = subprocess.run(["getent", "passwd", name], capture_output=True, text=True, check=False).stdout
    return out.strip() or "absent"


def probe(spec: dict) -> dict[str, str]:
    entries: dict[str, str] = {}
    for pattern in spec.get("files", []):
        paths = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        for path in paths:
            entries[f"file:{path}"] = _describe(path) if os.path.lexists(path) else "absent"
    for pattern in spec.get("trees", []):
        roots = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        for root in roots:
            _tree(entries, "file", root, _describe)
    for root in spec.get("stat_file_trees", []):
        _tree(entries, "stat", root, _stat)
    for pattern in spec.get("stat_trees", []):
        for root in sorted(glob.glob(pattern)):
            entries[f"tree:{root}"] = _stat_digest(root)
    for root in spec.get("listings", []):
        entries[f"listing:{root}"] = " ".join(sorted(os.listdir(root))) if os.path.isdir(root) else "absent"
    entries.update(_units(spec.get("units", []), spec.get("unit_patterns", [])))
    entries.update(_packages([*spec.get("packages", []), *spec.get("package_patterns", [])]))
    entries.update(_host(spec.get("users", [])))
    for name in spec.get("users", []):
        entries[f"user:{name}"] = _account(name)
    return entries


if __name__ == "__main__":
    print(json.dumps({"entries": probe(json.loads(sys.argv[1]))}, sort_keys=True))
