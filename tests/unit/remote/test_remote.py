"""installer/hosts/remote.py, the one way the flows reach hosts: each host's own result in order (a
failed or silent host is one row, never the batch), the privilege rule, atomic writes, progress.
The commands run here through tests/support/local_hosts.py's stand-ins for ssh."""

import shlex
import stat
from pathlib import Path

from installer.hosts import remote
from installer.hosts.ssh import Target
from tests.support.local_hosts import DownHost, HereHost, SilentHost


def test_every_host_answers_for_itself_in_order() -> None:
    hosts = [HereHost("a", "10.0.0.1", "root", 22, None, None), DownHost("b", "10.0.0.2", "root", 22, None, None),
             SilentHost("c", "10.0.0.3", "root", 22, None, None)]
    heard: list[str] = []
    found = remote.run(hosts, "echo hello; cat", stdin=b"in", timeout=2, on_done=lambda r: heard.append(r.host))
    assert [r.host for r in found] == ["a", "b", "c"] and sorted(heard) == ["a", "b", "c"]
    a, b, c = found
    assert (a.ok, a.text) == (True, "hello\nin")
    assert b.rc == 255 and "No route to host" in b.why
    assert c.rc == remote.NO_ANSWER and c.why == "no answer within 2 s"
    assert remote.failures(found) == [f"b: {b.why}", "c: no answer within 2 s"]


def test_another_ssh_user_runs_the_command_through_sudo() -> None:
    root = Target("a", "10.0.0.1", "root", 22, None, None)
    admin = Target("b", "10.0.0.2", "admin", 22, None, None)
    assert remote.as_root(root, "cat /etc/x") == "cat /etc/x"
    assert remote.as_root(admin, "cat /etc/x; id") == "sudo -n sh -c " + shlex.quote("cat /etc/x; id")
    # the argv ssh gets: the user by -l, the address after --, the command last
    argv = admin.ssh_argv(remote.as_root(admin, "true"))
    assert argv[argv.index("-l") + 1] == "admin" and argv[-2:] == ["10.0.0.2", "sudo -n sh -c true"]


def test_a_write_is_whole_atomic_and_readable(tmp_path: Path) -> None:
    path = tmp_path / "drain file.json"
    content = "{\"engines\": [\"a'b\", \"$HOME\", \"`id`\"]}\n"
    found = remote.write([HereHost("a", "10.0.0.1", "root", 22, None, None)], str(path), content)
    assert remote.failures(found) == []
    assert path.read_text() == content
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert not Path(f"{path}.tmp").exists()


def test_a_failed_write_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "stages.json"
    path.write_text("old\n")
    (tmp_path / "stages.json.tmp").mkdir()  # the temp file cannot be made: nothing replaces the file
    found = remote.write([HereHost("a", "10.0.0.1", "root", 22, None, None)], str(path), "new\n")
    assert len(remote.failures(found)) == 1
    assert path.read_text() == "old\n"
