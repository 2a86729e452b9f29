"""What of the state folder (installer/base/paths.py) an export carries, and what it leaves out.

Every name the installer writes at the top of the state folder is listed here, kept or left
out with the reason: tests/unit/state_archive/test_contents.py fails when the code writes a
name this table does not know, so a new kind of state cannot be left behind unnoticed.
"""

from pathlib import Path, PurePosixPath

from installer.state_archive import StateArchiveError

# name at the top of the state folder -> what it holds (all of it moves)
KEPT: dict[str, str] = {
    "keys.json": "API keys: their hashes, names, roles and token quotas",
    "probe-key": "the secret of the installer's own probe key (installer-probe)",
    "tls": "each deployment's CA (key and certificate) and issued certificates",
    "redis": "each deployment's Redis password",
    "metrics": "each deployment's metrics scrape token",
    "state.json": "the revisions of every deployment, and a gray release in progress",
    "revisions": "each revision's snapshot: inventory, plan and what it deployed",
    "audit.jsonl": "the hash-chained audit trail (its key travels beside it)",
    "terraform": "Terraform state and the rendered root modules of cloud deployments",
    "keys": "bundle signing keys (private and public)",
    "ray": "each multi-host deployment's Ray token: a new one would restart Ray and its engines",
    "weights": "each deployment's weights fan-out token (model.distribute: fanout), moved like the "
               "other deployment secrets so that an import changes nothing the next `up` renders",
    "request-audit-heads.json": "each gateway host's last checked request-audit record, which "
                                "`installer audit --requests` compares against to find a rewrite",
}

# left out, with why: caches and records the next command makes again, and machine-local things
LEFT_OUT: dict[str, str] = {
    "converged": "the fast-path record: the next `installer up` runs Ansible in full and writes it again",
    "runs": "logs of past runs (history, not state; can be large): they stay on the old machine",
    "support": "support archives already written for tickets",
    "lab": "the local test lab's machines and model, which belong to this machine",
}
# lock files (state.lock, release-<deployment>.lock) are made on use
LEFT_OUT_SUFFIXES = (".lock",)
# Terraform's provider plugins: `terraform init` fetches them again (from the mirror when air-gapped)
LEFT_OUT_DIRS_BELOW = {"terraform": ".terraform"}


def classify(top: str) -> str | None:
    """'kept', 'left out', or None for a name this installer does not write."""
    if top in KEPT:
        return "kept"
    if top in LEFT_OUT or top.endswith(LEFT_OUT_SUFFIXES):
        return "left out"
    return None


def skipped_below(rel: PurePosixPath) -> bool:
    """A path inside a kept entry that is a rebuildable cache (terraform/<deployment>/.terraform)."""
    inner = LEFT_OUT_DIRS_BELOW.get(rel.parts[0])
    return inner is not None and inner in rel.parts[1:]


def walk(state: Path) -> tuple[list[PurePosixPath], list[str]]:
    """(every kept directory and regular file under `state`, relative, parents first; the top
    names left out because this installer does not know them, so the export can say so)."""
    kept: list[PurePosixPath] = []
    unknown: list[str] = []
    for top in sorted(p.name for p in state.iterdir()):
        if classify(top) != "kept":
            if classify(top) is None:
                unknown.append(top)
            continue
        root = state / top
        paths = [root, *sorted(root.rglob("*"))] if root.is_dir() and not root.is_symlink() else [root]
        for path in paths:
            rel = PurePosixPath(path.relative_to(state).as_posix())
            if skipped_below(rel):
                continue
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                raise StateArchiveError(
                    f"{path} is a link or a special file: the state folder holds none, and an archive carries none",
                    ["replace it with the file it stands for, or move it out of the state folder"],
                )
            kept.append(rel)
    return kept, unknown
