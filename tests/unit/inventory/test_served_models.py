"""`models:` in the inventory: what served_models() gives the plan, and that the single `model:`
form and a revision's snapshot mean what they meant."""

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from installer.inventory import Inventory
from installer.inventory.release import ReleaseSettings


def _weights(tmp: Path) -> str:
    (tmp / "w").mkdir(exist_ok=True)
    (tmp / "w" / "config.json").write_text("{}")
    return str(tmp / "w")


def _inv(tmp: Path, **extra: Any) -> Inventory:
    return Inventory.model_validate({
        "deployment": "demo",
        "hosts": [{"name": "h1", "address": "10.0.0.1"}, {"name": "h2", "address": "10.0.0.2"},
                  {"name": "mon", "address": "10.0.0.3", "groups": ["monitoring"]}],
        "engine": {"device": "cpu", "max_num_seqs": 8, "extra_args": ["--seed", "1"]},
        **extra,
    })


def _three(tmp: Path) -> list[dict[str, Any]]:
    w = _weights(tmp)
    return [
        {"name": "chat", "served_name": "tiny", "path": w, "engine": {"max_num_seqs": 4}},
        {"name": "emb", "served_name": "tiny-embed", "path": w, "task": "embed", "hosts": ["h1"]},
        {"name": "rank", "served_name": "org/tiny-rerank", "path": w, "task": "score", "hosts": ["h2"],
         "engine": {"extra_args": []}, "release": {"steps": [10, 100], "sticky": "session"}},
    ]


def test_single_model_form_is_one_generate_model_named_main_on_every_serving_host(tmp_path: Path) -> None:
    inv = _inv(tmp_path, model={"path": _weights(tmp_path), "served_name": "tiny"})
    (main,) = inv.served_models()
    assert (main.name, main.task, main.hosts, main.served_name) == ("main", "generate", ("h1", "h2"), "tiny")
    assert main.engine is inv.engine and main.model is inv.model and main.release == ReleaseSettings()
    # dumps as before `models:` existed: the revisions' config digest is unchanged
    assert "models" not in json.loads(inv.model_dump_json())


def test_models_list_merges_engine_overrides_and_places_models_on_their_hosts(tmp_path: Path) -> None:
    inv = _inv(tmp_path, models=_three(tmp_path))
    chat, emb, rank = inv.served_models()
    assert [m.name for m in (chat, emb, rank)] == ["chat", "emb", "rank"]
    assert (chat.hosts, emb.hosts, rank.hosts) == (("h1", "h2"), ("h1",), ("h2",))
    assert (chat.task, emb.task, rank.task) == ("generate", "embed", "score")
    # the primary's engine is inv.engine: its override on top of the top-level settings
    assert inv.model.served_name == "tiny" and inv.engine == chat.engine
    assert (chat.engine.max_num_seqs, emb.engine.max_num_seqs, rank.engine.max_num_seqs) == (4, 8, 8)
    assert (emb.engine.extra_args, rank.engine.extra_args) == (["--seed", "1"], [])
    assert all(m.engine.device == "cpu" for m in (chat, emb, rank))
    # set only where written: the GPU tuner tells the inventory's own sizing from its defaults
    assert chat.engine.model_fields_set == {"device", "max_num_seqs", "extra_args"}
    assert rank.model.dir_name == "org--tiny-rerank"
    assert rank.release.steps == [10, 100] and rank.release.sticky == "session"
    assert chat.release.slo.latency_floor_s == 0.8 and chat.release.slo.window_s == 120


def test_a_revision_snapshot_of_models_loads_back_the_same(tmp_path: Path) -> None:
    inv = _inv(tmp_path, models=_three(tmp_path))
    data = json.loads(inv.model_dump_json(indent=1, exclude_unset=True))  # what revisions.py writes
    # the top-level engine as written, not the primary's merge (others would inherit its overrides)
    assert data["engine"] == {"device": "cpu", "max_num_seqs": 8, "extra_args": ["--seed", "1"]}
    assert "model" not in data
    again = Inventory.model_validate(data)
    assert again.served_models() == inv.served_models() and again.engine == inv.engine
    assert again.model_dump_json() == inv.model_dump_json()


def test_cloud_models_may_not_name_hosts(tmp_path: Path) -> None:
    models = _three(tmp_path)
    with pytest.raises(ValidationError, match="names its hosts itself"):
        Inventory.model_validate({
            "deployment": "demo", "provider": "aws", "models": models,
            "cloud": {"region": "us-east-1", "zone": "us-east-1a", "instance_type": "g5.xlarge",
                      "image": "ami-0123456789abcdef0", "allowed_cidrs": ["10.0.0.0/8"],
                      "ssh_public_key": str(tmp_path / "k.pub")},
        })


@pytest.mark.parametrize(("release", "why"), [
    ({"steps": [20, 50]}, "end at 100"),
    ({"steps": [50, 50, 100]}, "rise strictly"),
    ({"steps": []}, "at least 1 item"),
    ({"sticky": "cookie"}, "'key' or 'session'"),
    ({"slo": {"ttft_p99_ratio": 0.5}}, "greater than or equal to 1"),
])
def test_release_settings_refuse_what_a_release_could_not_follow(
    tmp_path: Path, release: dict[str, Any], why: str
) -> None:
    models = _three(tmp_path)
    models[0]["release"] = release
    with pytest.raises(ValidationError, match=why):
        _inv(tmp_path, models=models)


def test_a_model_listing_a_host_twice_is_refused(tmp_path: Path) -> None:
    models = _three(tmp_path)
    models[1]["hosts"] = ["h1", "h1"]
    with pytest.raises(ValidationError, match="listed twice"):
        _inv(tmp_path, models=models)
