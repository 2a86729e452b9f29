"""`installer verify --weights` (installer/flows/weights_check.py): which list and which folder each
served model is checked against on a host, always whole (--full), the verifier sent on stdin;
and the verifier's --prefix reading a bundle's own files, as it does on the host."""

import json
import shlex
import subprocess
from pathlib import Path

from installer.bundle.manifest import Manifest, scan
from installer.flows import weights_check as check
from installer.inventory import load_inventory
from installer.weights import verify as weights_verify


def test_each_source_is_checked_where_the_engines_read_it(tmp_path: Path) -> None:
    for name in ("chat", "embed", "rank"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    path = tmp_path / "inv.yml"
    path.write_text("""deployment: w
hosts:
  - {name: h1, address: 10.0.0.1}
  - {name: h2, address: 10.0.0.2}
engine: {device: cpu}
models:
  - {name: chat, served_name: tiny-chat, path: ./chat}
  - {name: emb, served_name: org/embed, path: ./embed, task: embed, hosts: [h1], source: {hosts: /data/embed}}
  - {name: rank, served_name: rank, path: ./rank, task: score, hosts: [h1], source: {mirror: 'https://m.lab/rank'}}
""")
    inv = load_inventory(path)
    bundle = "b" * 64
    manifest = f"/var/lib/private-llm/bundles/{'b' * 24}/manifest.json"
    got = {f.folder: (f.root, f.args) for f in check.folders(inv, inv.hosts[0], bundle)}
    assert got == {
        "tiny-chat": ("/var/lib/private-llm/models/tiny-chat", ("--manifest", manifest, "--prefix", "model/")),
        "org--embed": ("/data/embed", ("--manifest", manifest, "--folder", "org--embed")),
        "rank": ("/var/lib/private-llm/models/rank", ("--manifest", manifest, "--folder", "rank")),
    }
    assert [f.folder for f in check.folders(inv, inv.hosts[1], bundle)] == ["tiny-chat"]
    argv = shlex.split(check.command(check.folders(inv, inv.hosts[0], bundle)[1]).split(" && ", 1)[1])
    assert argv[:3] == ["python3", "-", "verify"] and "--full" in argv
    assert argv[argv.index("--cache") + 1] == "/var/lib/private-llm/weights/cache/org--embed.json"


def test_the_verifier_on_stdin_checks_a_bundled_folder_by_its_prefix(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "model").mkdir(parents=True)
    (bundle / "model" / "config.json").write_text("{}")
    (bundle / "model" / "model.safetensors").write_bytes(b"w" * 5000)
    (bundle / "wheels").mkdir()
    (bundle / "wheels" / "x.whl").write_bytes(b"not weights")
    (bundle / "manifest.json").write_text(Manifest({}, {}, [], scan(bundle)).to_json())
    served = tmp_path / "models" / "tiny"
    served.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        (served / name).write_bytes((bundle / "model" / name).read_bytes())

    def run() -> dict:
        argv = ["python3", "-", "verify", "--root", str(served), "--manifest", str(bundle / "manifest.json"),
                "--prefix", "model/", "--full"]
        proc = subprocess.run(argv, input=check.VERIFIER.read_bytes(), capture_output=True, check=False)
        return json.loads(proc.stdout)

    assert run()["ok"] and run()["hashed_files"] == 2
    (served / "model.safetensors").write_bytes(b"w" * 4999 + b"x")
    assert run()["problems"] == ["model.safetensors: sha256 differs from the signed manifest"]
    assert Path(weights_verify.__file__) == check.VERIFIER
