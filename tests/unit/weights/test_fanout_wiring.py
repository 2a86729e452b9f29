"""`up`'s side of a weights fan-out (installer/planning/weights_fanout.py): which hosts and
bundle folders take part, what the push leaves to the fan-out, and the variables the model
role gets (rendered into hosts.yml), the run id stable for one bundle so a converged `up` stays
converged, the token a file path, never its contents."""

from pathlib import Path

from installer.ansible import render
from installer.bundle import weights_fanout
from installer.bundle.manifest import Manifest
from installer.inventory import load_inventory
from installer.planning import plan as planning
from tests.support.weights_fanout import fanout_inventory

MODELS = (
    "models:\n"
    "  - {name: chat, served_name: tiny, path: ./weights, distribute: fanout}\n"
    "  - {name: emb, served_name: org/emb, path: ./weights, task: embed, distribute: fanout}\n"
    "  - {name: rank, served_name: rank, path: ./weights, task: score, hosts: [h1]}\n"
)


def test_the_fanned_out_folders_go_to_the_seed_only(tmp_path: Path) -> None:
    inv = load_inventory(fanout_inventory(tmp_path, MODELS))
    assert weights_fanout.hosts(inv) == ["h1", "h2", "h3"]
    assert weights_fanout.folders(inv) == ["model/", "models/org--emb/"]  # not rank's: it is pushed
    assert weights_fanout.push_skips(inv) == {"h2": ("model/", "models/org--emb/"),
                                              "h3": ("model/", "models/org--emb/")}


def test_without_a_fanout_nothing_changes(tmp_path: Path) -> None:
    inv = load_inventory(fanout_inventory(tmp_path, "model:\n  path: ./weights\n  served_name: tiny\n"))
    man = Manifest({}, {}, [], [])
    assert weights_fanout.push_skips(inv) == {} and weights_fanout.host_vars(inv, man, "/b", "/t") == {}


def test_each_host_gets_its_part_in_hosts_yml(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))
    inv = load_inventory(fanout_inventory(tmp_path, MODELS))
    man = Manifest({}, {}, [], [])
    found = render.hosts_yaml(planning.build(inv), man)["all"]["hosts"]
    again = render.hosts_yaml(planning.build(inv), man)["all"]["hosts"]
    assert found == again  # the same bundle renders the same variables
    h1, h3 = found["h1"]["model_fanout"], found["h3"]["model_fanout"]
    assert h1["seed"] and h1["fetch"] == [] and h3["sources"] == ["h2", "h1"]
    assert h3["run"] == f"b{man.bundle_id[:12]}" and h3["address"] == "10.0.0.3"
    assert found["h3"]["model_fanout_token_src"].endswith("/weights/w.fanout.token")
    assert [f["prefix"] for f in h3["fetch"]] == ["model/", "models/org--emb/"]
    assert h3["fetch"][0]["argv"][h3["fetch"][0]["argv"].index("--root") + 1].endswith("/model")
