"""`distribute: push | fanout` (docs/weights.md, "Fan-out between hosts"): push by default and
left out of the dump when unset (the revision's config digest is unchanged); fanout refused,
at its line, for weights by reference, without TLS, and for models fanned out on different
hosts."""

from pathlib import Path

import pytest

from installer.base.errors import InventoryError
from installer.inventory import load_inventory
from tests.support.weights_fanout import fanout_inventory


def _refused(path: Path) -> str:
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    return "\n".join([str(err.value), *err.value.details])


ONE = "model:\n  path: ./weights\n  served_name: tiny\n"


def test_push_is_the_default_and_unset_it_is_not_dumped(tmp_path: Path) -> None:
    inv = load_inventory(fanout_inventory(tmp_path, ONE))
    assert inv.model.distribute == "push" and "distribute" not in inv.model_dump()["model"]
    inv = load_inventory(fanout_inventory(tmp_path, ONE + "  distribute: fanout\n"))
    assert inv.model.distribute == "fanout" and inv.model_dump()["model"]["distribute"] == "fanout"


def test_fanout_of_weights_by_reference_is_refused_at_its_line(tmp_path: Path) -> None:
    text = _refused(fanout_inventory(tmp_path, ONE + "  source: {hosts: /data/models/tiny}\n  distribute: fanout\n"))
    assert f"{tmp_path / 'inv.yml'}:6: model: distribute: fanout" in text and "nothing is pushed" in text, text


def test_fanout_without_tls_is_refused_at_its_line(tmp_path: Path) -> None:
    text = _refused(fanout_inventory(tmp_path, ONE + "  distribute: fanout\n", "tls: {mode: 'off'}\n"))
    assert f"{tmp_path / 'inv.yml'}:9: model.distribute" in text and "needs tls" in text, text


def test_models_fanned_out_on_different_hosts_are_refused_at_the_second(tmp_path: Path) -> None:
    models = (
        "models:\n"
        "  - {name: chat, served_name: tiny, path: ./weights, distribute: fanout}\n"
        "  - {name: emb, served_name: emb, path: ./weights, task: embed, hosts: [h1, h2], distribute: fanout}\n"
    )
    text = _refused(fanout_inventory(tmp_path, models))
    assert f"{tmp_path / 'inv.yml'}:8: models[1].distribute" in text and "different hosts" in text, text
    assert load_inventory(fanout_inventory(tmp_path, models.replace(", distribute: fanout}\n", "}\n", 1)))


def test_fanout_hosts_given_by_name_are_refused(tmp_path: Path) -> None:
    path = fanout_inventory(tmp_path, ONE + "  distribute: fanout\n")
    path.write_text(path.read_text().replace("address: 10.0.0.2", "address: gpu2.lab"))
    text = _refused(path)
    assert f"{tmp_path / 'inv.yml'}:9: model.distribute" in text and "h2 given by name" in text, text


def test_the_fanout_floor_rate_defaults_unset_and_is_checked_at_its_line(tmp_path: Path) -> None:
    inv = load_inventory(fanout_inventory(tmp_path, ONE + "  distribute: fanout\n"))
    assert inv.model.fanout_min_rate_mb_s == 100 and "fanout_min_rate_mb_s" not in inv.model_dump()["model"]
    inv = load_inventory(fanout_inventory(tmp_path, ONE + "  distribute: fanout\n  fanout_min_rate_mb_s: 12.5\n"))
    assert inv.model.fanout_min_rate_mb_s == 12.5 and inv.model_dump()["model"]["fanout_min_rate_mb_s"] == 12.5
    text = _refused(fanout_inventory(tmp_path, ONE + "  distribute: fanout\n  fanout_min_rate_mb_s: 0\n"))
    assert f"{tmp_path / 'inv.yml'}:10: model.fanout_min_rate_mb_s" in text and "greater than 0" in text, text
    # given for a model that is pushed: it would do nothing, so it is refused at its line
    text = _refused(fanout_inventory(tmp_path, ONE + "  fanout_min_rate_mb_s: 50\n"))
    assert f"{tmp_path / 'inv.yml'}:9: model.fanout_min_rate_mb_s" in text and "set distribute: fanout" in text, text
    models = "models:\n  - {name: chat, served_name: tiny, path: ./weights, fanout_min_rate_mb_s: 50}\n"
    text = _refused(fanout_inventory(tmp_path, models))
    assert f"{tmp_path / 'inv.yml'}:7: models[0].fanout_min_rate_mb_s" in text, text
