"""Which keys may send the release-stage header: key_roles.json, beside keys.json, from the
key store's release testers and the installer's probe key (service/keyfile.py)."""

import json
from pathlib import Path

from installer.secrets import keys
from service.auth import KeyRing
from tests.support import keyfile_before_quotas


def test_testers_and_the_probe_key_are_the_only_release_testers(tmp_path: Path) -> None:
    store = tmp_path / "keys.json"
    keys.create("plain", path=store)
    keys.create("qa", release_tester=True, path=store)
    keys.create("gone", release_tester=True, path=store)
    keys.revoke("gone", path=store)
    keys.create(keys.PROBE_KEY_NAME, path=store)
    roles = json.loads(keys.render_roles_file(keys.load(store)))
    assert roles == {"version": 1, "release_testers": [keys.PROBE_KEY_NAME, "qa"]}
    # keys.json keeps the schema every earlier gateway reads
    old = keyfile_before_quotas.HostKeyFile.model_validate_json(keys.render_hosts_file(keys.load(store)))
    assert [k.name for k in old.keys] == ["plain", "qa", keys.PROBE_KEY_NAME]

    hosts_file = tmp_path / "hosts" / "keys.json"
    hosts_file.parent.mkdir()
    keys.write_hosts_file(hosts_file, keys.load(store))
    assert (hosts_file.parent / "key_roles.json").stat().st_mode & 0o777 == 0o600
    ring = KeyRing(hosts_file)
    testers = {k.name: k.release_tester for k in ring.loaded()}
    assert testers == {"plain": False, "qa": True, keys.PROBE_KEY_NAME: True}
    assert ring.digests["roles_sha256"] is not None


def test_a_gateway_without_key_roles_json_has_no_testers(tmp_path: Path) -> None:
    store = tmp_path / "keys.json"
    keys.create("qa", release_tester=True, path=store)
    hosts_file = tmp_path / "keys.hosts.json"
    hosts_file.write_text(keys.render_hosts_file(keys.load(store)))
    ring = KeyRing(hosts_file)
    assert [k.release_tester for k in ring.loaded()] == [False]
    assert ring.digests["roles_sha256"] is None
