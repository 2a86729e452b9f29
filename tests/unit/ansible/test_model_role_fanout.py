"""The model role's fan-out tasks for real (ansible-playbook, connection local, three hosts
with a state and a bundle folder each, loopback addresses 127.0.0.41-43): only h1, the seed,
holds the weights, as the push leaves it; h2 and h3 fetch them from the hosts before them with
the argv fanout.host_runs made, and the role's copy then installs and checks them as for a
bundle pushed whole. The serving unit's `systemd-run` needs a real systemd (the lab's hosts):
here the server's own argv is started in the background instead, and `systemctl stop` finds
nothing to stop (the task tolerates that; the server's deadline ends it)."""

import contextlib
import json
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

import ansible_runner

from benchmarks.weights_fanout import PYTHON, free_port
from installer.bundle import weights
from installer.bundle.manifest import Manifest, scan
from installer.tls import ca
from installer.weights import fanout
from tests.support import REPO

ADDRESSES = {"h1": "127.0.0.41", "h2": "127.0.0.42", "h3": "127.0.0.43"}
PRIMARY = "tiny-chat"
CHAT = {"config.json": b'{"chat": 1}', "model.safetensors": b"chat weights"}


def _bundle(root: Path, files: dict[str, bytes]) -> Path:
    """The primary model's weights where the bundle build puts them, with their sha256sum list."""
    for name, data in files.items():
        path = root / weights.bundle_dir(PRIMARY, PRIMARY) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    listed = Manifest({}, {}, [], scan(root)).checksums_text(prefix=weights.bundle_dir(PRIMARY, PRIMARY) + "/")
    (root / weights.checksums_file(PRIMARY, PRIMARY)).write_text(listed)
    return root


def _manifest(bundle: Path) -> str:
    return json.dumps({"files": [vars(f) for f in Manifest({}, {}, [], scan(bundle)).files]})


def test_the_later_hosts_fetch_the_seed_s_weights_and_the_role_installs_them(tmp_path: Path) -> None:
    seed = _bundle(tmp_path / "h1" / "bundle", {**CHAT, "model-2.safetensors": os.urandom(3_000_000)})
    manifest = _manifest(seed)
    (seed / "manifest.json").write_text(manifest)
    control = tmp_path / "control"
    control.mkdir()
    authority = ca.create_ca("fanout-role")
    (control / "ca.pem").write_bytes(authority.cert_pem)
    (control / "token").write_text(os.urandom(24).hex())
    (control / "token").chmod(0o600)
    hosts: dict[str, Any] = {}
    run = fanout.host_runs(fanout.plan(list(ADDRESSES)), ADDRESSES, "role1", ["model/"],
                           bundle_dir="BUNDLE", state_dir="STATE", port=free_port(), wait_s=60,
                           deadline_s=120, python=PYTHON)
    for name, address in ADDRESSES.items():
        home = tmp_path / name
        bundle, state = home / "bundle", home / "state"
        state.mkdir(parents=True)
        if name != "h1":  # the push sent them the bundle without its weights
            (bundle).mkdir()
            (bundle / "manifest.json").write_text(manifest)
            (bundle / "model.sha256").write_bytes((seed / "model.sha256").read_bytes())
        issued = ca.issue_server(authority, name, [name], [address], days=1)
        (control / f"{name}.pem").write_bytes(issued.cert_pem)
        (control / f"{name}.key").write_bytes(issued.key_pem)
        mine = json.loads(json.dumps(run[name]).replace("BUNDLE", str(bundle)).replace("STATE", str(state))
                          .replace(f"/run/{run[name]['unit']}", str(home)))
        argv = mine["serve_argv"]
        server = [a.replace(fanout.CREDENTIALS, mine["stage"]) for a in argv[argv.index("--") + 1:]]
        mine["serve_argv"] = ["sh", "-c", f"{shlex.join(server)} >{home}/serve.log 2>&1 </dev/null & "
                              f"echo $! >{home}/serve.pid"]
        hosts[name] = {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "pli_state_dir": str(state), "pli_bundle_dir": str(bundle), "model_fanout": mine,
            "tls_ca_src": str(control / "ca.pem"), "tls_cert_src": str(control / f"{name}.pem"),
            "tls_key_src": str(control / f"{name}.key"), "model_fanout_token_src": str(control / "token"),
        }
    project = tmp_path / "project"
    project.mkdir()
    (tmp_path / "runner").mkdir()
    (project / "play.yml").write_text(json.dumps([{
        "hosts": "all", "gather_facts": False, "roles": ["model"],
        "handlers": [{"name": "Engine restart", "listen": "private-llm model changed",
                      "ansible.builtin.debug": {"msg": "restart"}}],
    }]))
    try:
        r = ansible_runner.run(
            private_data_dir=str(tmp_path / "runner"), project_dir=str(project), playbook="play.yml",
            inventory={"all": {"hosts": hosts}},
            extravars={"models": [{"name": "chat", "served_name": PRIMARY, "dir_name": PRIMARY, "task": "generate",
                                   "hosts": list(ADDRESSES)}], "model_dir_name": PRIMARY},
            envvars={"ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"), "ANSIBLE_NOCOLOR": "True",
                     "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
            quiet=True, suppress_env_files=True,
        )
        out = r.stdout.read()
        assert r.rc == 0, out[-4000:]
        for name in ADDRESSES:
            models = tmp_path / name / "state" / "models" / PRIMARY
            assert (models / "model.safetensors").read_bytes() == CHAT["model.safetensors"], name
            shard = (seed / "model" / "model-2.safetensors").read_bytes()
            assert (models / "model-2.safetensors").read_bytes() == shard, name
            stage = tmp_path / name / "state" / "weights" / "fanout"
            assert sorted(p.name for p in stage.iterdir() if not p.name.startswith("progress")) == ["ca.pem", "tls.pem"]
        assert "h3 <- h2: fetched 0.00 GB" in out and "h1 (seed, from the push): fetched 0.00 GB" in out
        served = json.loads((tmp_path / "h1" / "stats.json").read_text())
        assert served["total"] >= 3_000_000  # the seed served its weights to h2 (and h3's fallback)
        assert (control / "token").read_text() not in out  # staged with no_log, never in an argv
        assert (control / "h2.key").read_text().splitlines()[1] not in out
    finally:
        for name in ADDRESSES:
            pid_file = tmp_path / name / "serve.pid"
            if pid_file.exists():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid_file.read_text()), signal.SIGTERM)
