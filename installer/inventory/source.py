"""Where a setting sits in the inventory file, so every message about it can say file:line."""

from dataclasses import dataclass, field

Loc = tuple[str | int, ...]


def dotted(loc: Loc) -> str:
    """("hosts", 0, "address") -> "hosts[0].address"."""
    out = ""
    for part in loc:
        if isinstance(part, str) and not part.isprintable():
            part = repr(part)  # an unknown key with a newline in it stays on one line
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


@dataclass(frozen=True)
class Source:
    """An inventory file and the line of every key path in it (the loader records them)."""

    path: str
    lines: dict[Loc, int] = field(default_factory=dict)

    def line(self, loc: Loc) -> int:
        """The line of `loc`, or of its nearest recorded parent (a default has no line)."""
        while loc and loc not in self.lines:
            loc = loc[:-1]
        return self.lines.get(loc, 1)

    def at(self, loc: Loc) -> str:
        """`file:line: dotted.key`, the start of a message about that setting."""
        return f"{self.path}:{self.line(loc)}: {dotted(loc)}"
