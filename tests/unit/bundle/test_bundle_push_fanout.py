"""The push for a weights fan-out (model.distribute: fanout): a host other than the seed gets
the bundle but the fanned-out folders' files it lacks, which it fetches from the other hosts;
what an earlier bundle of its holds is still linked, so a new bundle moves no weights twice.
The "host" is a folder here, reached through bash instead of ssh (test_bundle_push.py)."""

import os
from pathlib import Path

from installer.bundle import push
from tests.support.bundles import make_bundle
from tests.support.local_hosts import HereHost


def host(name: str) -> HereHost:
    return HereHost(name, "127.0.0.1", "root", 22, None, None)


def _no_progress(_host: str, _sent: int, _total: int) -> None:
    pass


WEIGHTS = {"model/model-00001.safetensors": os.urandom(8 << 20), "model/config.json": b'{"hidden_size": 64}'}


def test_a_fanout_host_gets_everything_but_the_weights_it_lacks(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    man = make_bundle(root, None, {**WEIGHTS, "wheels/demo-1.0-py3-none-any.whl": os.urandom(1 << 20)})
    dest = tmp_path / "host" / "b1"
    first = push.push_one(host("h2"), root, man, _no_progress, str(dest), fanout=("model/",))
    assert first.fanout_files == 2 and first.sent_bytes < (2 << 20)  # the 8 MB shard stayed home
    assert not (dest / "model").exists() and (dest / "wheels/demo-1.0-py3-none-any.whl").is_file()
    assert (dest / "manifest.json").read_bytes() == (root / "manifest.json").read_bytes()  # the fetch's list
    again = push.push_one(host("h2"), root, man, _no_progress, str(dest), fanout=("model/",))
    assert (again.sent_files, again.fanout_files) == (0, 2)


def test_weights_an_earlier_bundle_holds_are_linked_not_fetched_again(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    old = make_bundle(root, None, {**WEIGHTS, "playbooks/site.yml": b"---\n"})
    push.push_one(host("h2"), root, old, _no_progress, str(tmp_path / "host" / "old"))  # the fan-out's result
    new = make_bundle(root, None, {"playbooks/site.yml": b"---\n# changed\n"})
    up = push.push_one(host("h2"), root, new, _no_progress, str(tmp_path / "host" / "new"), fanout=("model/",))
    assert up.fanout_files == 0 and up.sent_files == 1
    assert (tmp_path / "host/new/model/model-00001.safetensors").stat().st_nlink == 2
