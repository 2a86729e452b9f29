"""The README's two commands are the ones CI runs, and every command a user copies works in a
root shell that has no sudo (a fresh root-only machine has none)."""

from tests.support.readme import REPO, bash_blocks, commands


def test_the_two_commands_are_what_ci_runs() -> None:
    first = commands(bash_blocks()[0])
    assert len(first) == 2, first
    setup, test = first
    ci_run = (REPO / ".ci" / "run").read_text()
    assert setup.startswith("bash .ci/setup && ") and "bash .ci/setup" in ci_run
    assert test == "bash .ci/test" and "exec bash .ci/test" in ci_run


def test_no_command_needs_sudo() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    offenders = [
        f"{page.relative_to(REPO)}: {line}"
        for page in pages for block in bash_blocks(page) for line in commands(block)
        if line.split()[0] == "sudo" or " sudo " in f" {line} "
    ]
    assert offenders == [], "run as root; sudo is not on a fresh root-only machine"
