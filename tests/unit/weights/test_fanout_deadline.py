"""The weights fan-out's deadline (#39): the serving units' RuntimeMaxSec and serve.py's
--deadline-s grow with the weights' size and the inventory's floor rate
(model.fanout_min_rate_mb_s) instead of a fixed hour, which cut a 700 GB fan-out over 1 Gbit/s
links short; the hour stays the least. Shown by `up`/`plan` (Deadline.describe) and in each
host's role variables."""

from pathlib import Path

import pytest

from installer.bundle import weights_fanout
from installer.bundle.manifest import FileEntry, Manifest
from installer.inventory import load_inventory
from installer.weights import fanout
from tests.support.weights_fanout import fanout_inventory

GB = 10**9
MODELS = (
    "models:\n"
    "  - {name: chat, served_name: tiny, path: ./weights, distribute: fanout, fanout_min_rate_mb_s: 125}\n"
    "  - {name: emb, served_name: org/emb, path: ./weights, task: embed, distribute: fanout}\n"
)


def test_deepseek_at_one_gigabit_gets_hours_not_one() -> None:
    # 690 GB in 5 GB shards to 16 hosts (a chain: 15 hops), links of 1 Gbit/s (125 MB/s)
    d = fanout.Deadline(690 * GB, 5 * GB, 15, 125.0, 600)
    transfer, lag, hashing = 690e9 / 125e6, 14 * 2 * 5e9 / 125e6, 690e9 / 250e6
    assert d.estimate_s == pytest.approx(transfer + lag + hashing)  # 5520 + 1120 + 2760 s
    assert d.seconds == round(2 * (transfer + lag + hashing) + 600) == 19400  # 5.4 h, not 1
    assert d.seconds > 3 * 3600 and transfer > 3600  # the old hour ended it before its transfer did
    # a slower floor stretches it in proportion (the hashing term stays)
    assert fanout.Deadline(690 * GB, 5 * GB, 15, 62.5, 600).seconds > d.seconds + 2 * transfer


def test_a_small_model_keeps_the_hour() -> None:
    d = fanout.Deadline(4 * GB, GB, 3, 100.0, 600)
    assert d.estimate_s < 200 and d.seconds == fanout.MIN_DEADLINE_S == 3600
    # one hop: no level lags another
    assert fanout.Deadline(GB, GB, 1, 100.0, 0).estimate_s == pytest.approx(1e9 / 100e6 + 1e9 / 250e6)


def test_the_plan_line_names_the_numbers() -> None:
    line = fanout.Deadline(690 * GB, 5 * GB, 15, 125.0, 600).describe()
    assert line.startswith("weights fan-out: 690.00 GB over 15 hop(s); its servers stop after 19400 s (5.4 h)")
    assert "125 MB/s (model.fanout_min_rate_mb_s)" in line and "at least 3600 s" in line


def test_up_derives_it_from_the_bundle_and_the_lowest_floor(tmp_path: Path) -> None:
    inv = load_inventory(fanout_inventory(tmp_path, MODELS))
    files = [FileEntry("model/a.safetensors", 300 * GB, "0" * 64), FileEntry("model/b.safetensors", 50 * GB, "1" * 64),
             FileEntry("models/org--emb/c.safetensors", 20 * GB, "2" * 64),
             FileEntry("bin/engine.whl", 900 * GB, "3" * 64)]  # not fanned out: not counted
    man = Manifest({}, {}, [], files)
    d = weights_fanout.deadline(inv, man)
    assert d == fanout.Deadline(370 * GB, 300 * GB, 2, 100.0, fanout.WAIT_S)  # emb's default floor, 3 hosts
    runs = weights_fanout.host_vars(inv, man, "/b", "/t")
    for host in ("h1", "h2", "h3"):
        run = runs[host]["model_fanout"]
        assert run["deadline_s"] == d.seconds > 3600
        argv = run["serve_argv"]
        assert f"--property=RuntimeMaxSec={d.seconds}" in argv and argv[-1] == f"--deadline-s={d.seconds}"
    fetch = runs["h3"]["model_fanout"]["fetch"][0]["argv"]
    assert f"--wait-s={fanout.WAIT_S}" in fetch


def test_no_fanout_no_deadline(tmp_path: Path) -> None:
    inv = load_inventory(fanout_inventory(tmp_path, "model:\n  path: ./weights\n  served_name: tiny\n"))
    assert weights_fanout.deadline(inv, Manifest({}, {}, [], [])) is None
