"""release start moves one model: an inventory that changes anything else against the revision
the hosts run is refused before any host is touched (promote would apply it all at once)."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from installer.base.runlog import RunLog
from installer.release import start
from installer.release.state import ReleaseError
from installer.state import revisions
from tests.support.revisions import SITE, anchored_site, known_revision

MODELS = SITE.replace(
    "model: {path: weights, served_name: tiny}\n",
    "models:\n"
    "  - {name: chat, path: weights, served_name: tiny}\n"
    "  - {name: emb, path: weights, served_name: tiny-emb, task: embed}\n",
)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with anchored_site(tmp_path, monkeypatch, tmp_path / "cwd") as path:
        yield path


def _installed(site: Path, text: str) -> None:
    site.write_text(text)
    revisions.record("demo", known_revision(site), {"a": True, "b": True}, RunLog("up", "demo"))


def _refusal(site: Path, model: str) -> str:
    with pytest.raises(ReleaseError) as err:
        start.check_startable(site, model)
    return " ".join([str(err.value), *err.value.details])


def test_only_the_released_models_entry_may_change(site: Path) -> None:
    _installed(site, MODELS)
    chat = "{name: chat, path: weights, served_name: tiny}"
    site.write_text(MODELS.replace(chat, chat[:-1] + ", engine: {max_num_seqs: 4}}"))
    release, canary = start.check_startable(site, "chat")  # the model's own change is the release
    assert release.model == "chat" and canary.engine.max_num_seqs == 4

    site.write_text(MODELS.replace(chat, chat[:-1] + ", engine: {max_num_seqs: 4}}")
                    .replace("task: embed}", "task: embed, engine: {max_num_seqs: 2}}\n"
                             "  - {name: rr, path: weights, served_name: tiny-rr, task: score}")
                    + "ports: {gateway: 8443}\n")
    text = _refusal(site, "chat")
    assert "changes more than model chat against revision 1" in text
    assert "model emb changed" in text and "model rr added" in text and "`ports`" in text
    assert "revert those changes, or apply them first with `installer up" in text


def test_a_removed_model_is_named(site: Path) -> None:
    _installed(site, MODELS)
    site.write_text(MODELS.replace("  - {name: emb, path: weights, served_name: tiny-emb, task: embed}\n", "")
                    .replace("served_name: tiny}", "served_name: tiny, engine: {max_num_seqs: 4}}"))
    assert "model emb removed" in _refusal(site, "chat")


def test_single_model_form_other_sections_are_named(site: Path) -> None:
    _installed(site, SITE)
    site.write_text(SITE.replace("engine: {device: cpu}", "engine: {device: cpu, max_num_seqs: 4}")
                    + "gateway: {max_body_bytes: 2048}\n")
    text = _refusal(site, "main")
    assert "changes more than model main" in text and "`gateway`" in text and "`engine`" not in text


def test_a_single_model_rewritten_as_a_models_list_is_the_same_model(site: Path) -> None:
    """Release settings live on a `models:` entry: a deployment of the single `model:` form moves
    to the list, naming its model `main`, to start its first release; only its engine changes."""
    _installed(site, SITE)
    site.write_text(SITE.replace(
        "model: {path: weights, served_name: tiny}\n",
        "models:\n  - {name: main, path: weights, served_name: tiny, engine: {max_num_seqs: 4},"
        " release: {steps: [20, 100]}}\n",
    ))
    release, canary = start.check_startable(site, "main")
    assert release.model == "main" and canary.engine.max_num_seqs == 4

    site.write_text(site.read_text().replace("name: main", "name: chat"))  # a rename is no release
    assert "revision 1 (what the hosts run) has no model named chat" in _refusal(site, "chat")


def test_a_cloud_inventory_lists_no_hosts_and_its_models_are_compared_on_the_recorded_ones(site: Path) -> None:
    """A cloud inventory's hosts come from Terraform (the file lists none): the other models keep
    the hosts the revision recorded, so they are not reported as changed."""
    from installer.inventory import load_inventory
    from installer.release import spec

    _installed(site, MODELS)
    stable = load_inventory(site)
    chat = "{name: chat, path: weights, served_name: tiny}"
    site.write_text(MODELS.replace(chat, chat[:-1] + ", engine: {max_num_seqs: 4}}"))
    target = load_inventory(site).model_copy(update={"provider": "aws", "hosts": []})
    assert spec.other_changes(stable, target, "chat") == ["`provider`"]  # and not "model emb changed"
