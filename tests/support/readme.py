"""The README's fenced shell blocks, as a user copies them: the tests run these verbatim."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^```bash\n(.*?)^```", re.DOTALL | re.MULTILINE)


def bash_blocks(path: Path = REPO / "README.md") -> list[str]:
    return _FENCE.findall(path.read_text(encoding="utf-8"))


def commands(block: str) -> list[str]:
    """The block's command lines: comment lines and blank lines dropped, trailing comments kept
    (bash ignores them)."""
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
