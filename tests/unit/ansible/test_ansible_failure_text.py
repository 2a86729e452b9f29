"""The reason a host failed, as the summary table shows it: read from a real ansible-playbook run
(connection local), so a loop's failure names the item and its reason, not "One or more items
failed" (which hid the cause of a CI failure)."""

from pathlib import Path

from installer.ansible.runner import run_playbook
from tests.support.roles import local_project

PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Restart the units
      ansible.builtin.command: "{{ _unit_cmd }}"
      loop: ["true", "sh -c 'echo unit-b refused >&2; exit 3'"]
      loop_control:
        loop_var: _unit_cmd
        label: "{{ _unit_cmd.split()[0] }}-unit"
"""


def test_a_failed_loop_names_its_item_and_reason(tmp_path: Path) -> None:
    books, inv = local_project(tmp_path, PLAY, "play.yml")
    result = run_playbook("play.yml", inv, tmp_path / "run", playbooks_dir=books)
    assert not result.success
    assert result.hosts["h1"].error == "Restart the units: sh-unit: unit-b refused"
