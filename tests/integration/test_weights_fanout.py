"""The weights fan-out with real processes on loopback: a control machine and four hosts, each
host its own address (127.0.0.11-14), certificate of one deployment CA, folder, `serve.py` and
`verify.py fetch` (the hosts' python3, no venv). The control machine feeds h1; h1 feeds h2 and
h3; h2 feeds h4. h2 is SIGKILLed (server and fetcher) while it is still fetching and while h4 is
fetching from it: h4 resumes from h1 and nobody stalls; the control machine sends the model
once. Run again, h2 resumes what it had and the control machine still sent it once."""

import json
import time
from pathlib import Path

import pytest

from benchmarks.weights_fanout import FanoutLab, make_model
from installer.weights import fanout, verify

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

FILES, SIZE = 6, 36_000_000  # six 6 MB shards, two at a time per host, each uplink at 8 MB/s


def test_a_host_killed_mid_transfer_stalls_no_one_and_the_run_again_resumes(tmp_path: Path) -> None:
    manifest = make_model(tmp_path / "source" / "model", SIZE, FILES)
    entries = json.loads(manifest.read_text())["files"]
    model_bytes = sum(e["size"] for e in entries)
    # a cap on each uplink so the kill lands mid-transfer on a busy machine (the product's option)
    lab = FanoutLab(tmp_path / "lab", tmp_path / "source" / "model", manifest, limit_mb_s=8)
    hosts = ["h1", "h2", "h3", "h4"]
    plan = fanout.plan(hosts, degree=2)
    assert [plan.parent[h] for h in hosts] == [fanout.CONTROL, "h1", "h1", "h2"]
    try:
        lab.serve(lab.control, lab.source)
        for i, name in enumerate(hosts):
            lab.serve(lab.host(name, i))
        for name in hosts:
            lab.fetch(lab.nodes[name], fanout.sources(plan, name), workers=2)
        h2, h4 = lab.nodes["h2"], lab.nodes["h4"]
        h2_origin = lab.url("h2").rstrip("/")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            seen = lab.read(h4.progress)
            if seen.get("source") == h2_origin and seen.get("bytes", 0) > 0:
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"h4 never fetched from h2: {lab.read(h4.progress)}")
        assert h2.fetcher is not None and h2.fetcher.poll() is None, "h2 finished before the kill"
        lab.kill(h2)

        for name in ("h1", "h3", "h4"):
            code, out = lab.wait(lab.nodes[name], timeout=180)
            assert (code, out.get("ok"), out.get("problems")) == (0, True, []), (name, out)
        assert lab.read(h4.progress)["source"] == lab.url("h1").rstrip("/")  # re-parented
        for name in ("h1", "h3", "h4"):
            assert verify.verify(str(lab.nodes[name].model), entries, full=True).problems == []
        assert lab.nodes["h2"].model.exists()
        staging = lab.work / "h2" / ".model.fetching"
        assert staging.exists()  # h2 left parts to resume

        # the run again: h2 resumes from its parent's parent; nothing more from the control link
        lab.fetch(h2, fanout.sources(plan, "h2"), workers=2)
        code, out = lab.wait(h2, timeout=180)
        assert (code, out["ok"], out["problems"]) == (0, True, []), out
        assert 0 < out["fetched_bytes"] < model_bytes, out  # only what h2 lacked travelled
        assert not staging.exists()
        time.sleep(0.6)  # the servers rewrite their stats at most twice a second
        assert lab.served(fanout.CONTROL) == model_bytes  # the control link carried it once
    finally:
        lab.stop()


def test_a_source_with_wrong_bytes_is_passed_over_and_one_that_never_has_the_file_times_out(
    tmp_path: Path,
) -> None:
    manifest = make_model(tmp_path / "source" / "model", 3_000_000, 2)
    entries = json.loads(manifest.read_text())["files"]
    lab = FanoutLab(tmp_path / "lab", tmp_path / "source" / "model", manifest)
    try:
        lab.serve(lab.control, lab.source)
        damaged, empty, fetcher = lab.host("h1", 0), lab.host("h2", 1), lab.host("h3", 2)
        for node in (damaged, empty):
            node.model.mkdir()
        for entry in entries:  # h1 holds every file at its size, every byte wrong: 409
            (damaged.model / entry["path"]).write_bytes(b"\0" * entry["size"])
        lab.serve(damaged)
        lab.serve(empty)  # h2 holds nothing: 503, "not here yet", for ever

        lab.fetch(fetcher, ["h2"], wait_s=2)
        code, out = lab.wait(fetcher)
        assert code == 2 and "503" in out["problems"][0], out

        lab.fetch(fetcher, ["h1", "h2", fanout.CONTROL], wait_s=2)
        code, out = lab.wait(fetcher)
        assert (code, out["ok"]) == (0, True), out
        assert lab.read(fetcher.progress)["source"] == lab.url(fanout.CONTROL).rstrip("/")
        assert verify.verify(str(fetcher.model), entries, full=True).problems == []
    finally:
        lab.stop()
