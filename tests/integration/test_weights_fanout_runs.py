"""The argv the model role runs for a fan-out (fanout.host_runs), run for real on loopback:
three hosts (127.0.0.31-33), each its own bundle folder, certificate of one deployment CA and
credentials folder, as systemd would hand them to the serving unit (${CREDENTIALS_DIRECTORY},
files only the unit's user can read). Only the seed holds the weights, two folders of them
(model/ and models/<dir>/), as the push leaves it; h2 and h3 run their fetch argv at once,
h3's parent being h2, and end with every file verified. systemd-run itself (the sandbox, the
dynamic user) needs a real systemd: the lab's hosts, not this test."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.weights_fanout import PYTHON, free_port
from installer.tls import ca
from installer.weights import fanout, verify

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

WEIGHTS = Path(fanout.__file__).parent
ADDRESSES = {"h1": "127.0.0.31", "h2": "127.0.0.32", "h3": "127.0.0.33"}
FOLDERS = {"model/": 3, "models/org--embed/": 2}  # bundle folder -> shards


def _bundle(root: Path) -> list[dict]:
    files = []
    for prefix, shards in FOLDERS.items():
        folder = root / prefix
        folder.mkdir(parents=True)
        for i in range(shards):
            (folder / f"model-{i}.safetensors").write_bytes(os.urandom(2_000_000 + i))
        (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
        files += [{**e, "path": prefix + e["path"]} for e in verify.describe(str(folder))]
    (root / "manifest.json").write_text(json.dumps({"files": files}))
    return files


def test_the_role_s_fanout_argv_moves_every_weights_folder_from_the_seed(tmp_path: Path) -> None:
    authority = ca.create_ca("fanout-runs")
    token = os.urandom(24).hex()
    seed_files = _bundle(tmp_path / "h1" / "bundle")
    runs = fanout.host_runs(fanout.plan(list(ADDRESSES)), ADDRESSES, "t1", list(FOLDERS),
                            bundle_dir="BUNDLE", state_dir="STATE", port=free_port(), wait_s=60, python=PYTHON)
    servers: list[subprocess.Popen] = []
    try:
        for host, address in ADDRESSES.items():
            home = tmp_path / host
            bundle, state, creds = home / "bundle", home / "state", home / "credentials"
            if host != "h1":
                bundle.mkdir(parents=True)
                shutil.copy(tmp_path / "h1" / "bundle" / "manifest.json", bundle)  # the push sends it to all
            (state / "weights" / "fanout").mkdir(parents=True)
            creds.mkdir()
            for script in ("verify.py", "serve.py"):
                shutil.copy(WEIGHTS / script, state / "weights" / script)
            issued = ca.issue_server(authority, host, [host], [address], days=1)
            stage = state / "weights" / "fanout"
            for folder in (stage, creds):
                for name, data in (("tls.pem", issued.cert_pem), ("tls.key", issued.key_pem),
                                   ("ca.pem", authority.cert_pem), ("token", token.encode())):
                    (folder / name).write_bytes(data)
                    (folder / name).chmod(0o400 if folder == creds else 0o600)

            def here(arg: str, home: Path = home, creds: Path = creds) -> str:
                return (arg.replace("BUNDLE", str(home / "bundle")).replace("STATE", str(home / "state"))
                        .replace(fanout.CREDENTIALS, str(creds))
                        .replace(f"/run/{runs['h1']['unit']}", str(home)))

            argv = runs[host]["serve_argv"]
            server = [here(a) for a in argv[argv.index("--") + 1:]]
            servers.append(subprocess.Popen(server, stdout=subprocess.PIPE, text=True))
            assert json.loads(servers[-1].stdout.readline())["ok"], host
            runs[host]["here"] = [[here(a) for a in f["argv"]] for f in runs[host]["fetch"]]

        assert runs["h1"]["here"] == []  # the seed has the push's copy
        fetchers = {(host, i): subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
                    for host in ("h2", "h3") for i, argv in enumerate(runs[host]["here"])}
        for key, proc in fetchers.items():
            out, _ = proc.communicate(timeout=150)
            result = json.loads(out)
            assert (proc.returncode, result["ok"], result["problems"]) == (0, True, []), (key, result)
        for host in ("h2", "h3"):
            bundle = tmp_path / host / "bundle"
            for prefix in FOLDERS:
                listed = [{**e, "path": e["path"][len(prefix):]} for e in seed_files if e["path"].startswith(prefix)]
                assert verify.verify(str(bundle / prefix), listed, full=True).problems == [], (host, prefix)
            assert not list(bundle.glob(".*.fetching")) and not list((bundle / "models").glob(".*.fetching"))
        progress = json.loads((tmp_path / "h3" / "state" / "weights" / "fanout" / "progress-model.json").read_text())
        assert progress["source"].startswith(f"https://{ADDRESSES['h2']}:")  # h3 fetched from its parent
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait(timeout=10)
