"""The inventory `lab up` writes: exact text, and the product's own loader accepts it."""

from pathlib import Path

from installer.inventory import load_inventory
from installer.lab import inventory

EXPECTED = """\
# written by `installer lab up` — lab "lab", 2 hosts
deployment: lab
provider: baremetal
ssh:
  user: root
  private_key: /abs/.installer/lab/lab/ssh/id_ed25519
  known_hosts: /abs/.installer/lab/lab/ssh/known_hosts
hosts:
  - name: lab1
    address: 10.213.0.11
    target: debian-12
  - name: lab2
    address: 10.213.0.12
    target: debian-13
model:
  path: /abs/.installer/lab/model/tiny-llama
  served_name: tiny-llama
engine:
  device: cpu
  max_model_len: 1024
  max_num_seqs: 8
  # lab hosts share this machine's cores: pinning every engine to core 0 starves a restart
  cpu_omp_threads_bind: nobind
  # the model in vLLM's engine-core process: a faster start, more tokens a second, less RAM
  cpu_inline_worker: true
monitoring:
  # a lab shows alerts within seconds (10 s `for:`, 5 s scrapes); production rides out blips
  alert_profile: test
"""


def test_render_matches_the_documented_format() -> None:
    text = inventory.render(
        "lab",
        [("lab1", "10.213.0.11", "debian-12"), ("lab2", "10.213.0.12", "debian-13")],
        Path("/abs/.installer/lab/lab/ssh/id_ed25519"),
        Path("/abs/.installer/lab/lab/ssh/known_hosts"),
        Path("/abs/.installer/lab/model/tiny-llama"),
    )
    assert text == EXPECTED


def test_one_host_is_singular() -> None:
    text = inventory.render("ci", [("ci1", "10.0.0.11", "debian-12")], Path("/k"), Path("/h"), Path("/m"))
    assert text.splitlines()[0] == '# written by `installer lab up` — lab "ci", 1 host'


def test_written_inventory_loads_even_with_awkward_paths(tmp_path: Path) -> None:
    base = tmp_path / "my project: #1"
    (base / "model").mkdir(parents=True)
    (base / "model" / "config.json").write_text("{}")
    (base / "id_ed25519").write_text("key")
    (base / "known_hosts").write_text("")
    text = inventory.render(
        "lab",
        [("lab1", "10.213.0.11", "debian-12"), ("lab2", "10.213.0.12", "debian-13")],
        base / "id_ed25519",
        base / "known_hosts",
        base / "model",
    )
    path = inventory.write(tmp_path / "inventory" / "lab.yml", text)
    inv = load_inventory(path)
    assert inv.ssh.private_key == base / "id_ed25519"
    assert inv.ssh.known_hosts == base / "known_hosts"
    assert inv.model.path == base / "model"
    assert [(h.name, h.address) for h in inv.hosts] == [("lab1", "10.213.0.11"), ("lab2", "10.213.0.12")]
    # Each host declares its own target: a mixed lab is a mixed fleet for the bundle.
    assert [inv.host_target(h) for h in inv.hosts] == ["debian-12", "debian-13"]
    assert inv.targets() == ["debian-12", "debian-13"]
    assert inv.engine.device == "cpu" and inv.engine.max_num_seqs == 8


def test_with_retrieval_models_the_lab_serves_three(tmp_path: Path) -> None:
    paths = {}
    for kind in ("chat", "embed", "rerank"):
        paths[kind] = tmp_path / kind
        paths[kind].mkdir()
        (paths[kind] / "config.json").write_text("{}")
    (tmp_path / "id_ed25519").write_text("key")
    (tmp_path / "known_hosts").write_text("")
    text = inventory.render(
        "lab",
        [("lab1", "10.213.0.11", "debian-12"), ("lab2", "10.213.0.12", "debian-12")],
        tmp_path / "id_ed25519",
        tmp_path / "known_hosts",
        paths["chat"],
        paths["embed"],
        paths["rerank"],
    )
    inv = load_inventory(inventory.write(tmp_path / "lab.yml", text))
    served = {m.served_name: (m.task, m.hosts, m.model.path) for m in inv.served_models()}
    assert served == {
        "tiny-llama": ("generate", ("lab1", "lab2"), paths["chat"]),
        "tiny-embed": ("embed", ("lab1",), paths["embed"]),
        "tiny-rerank": ("score", ("lab2",), paths["rerank"]),
    }
    # the primary is still the chat model, for everything that knows one model
    assert inv.model.served_name == "tiny-llama" and inv.engine.max_num_seqs == 8


def test_a_one_host_lab_runs_the_reranker_on_its_host(tmp_path: Path) -> None:
    for kind in ("chat", "embed", "rerank"):
        (tmp_path / kind).mkdir()
        (tmp_path / kind / "config.json").write_text("{}")
    (tmp_path / "k").write_text("key")
    (tmp_path / "h").write_text("")
    text = inventory.render(
        "ci", [("ci1", "10.0.0.11", "debian-12")], tmp_path / "k", tmp_path / "h",
        tmp_path / "chat", tmp_path / "embed", tmp_path / "rerank",
    )
    inv = load_inventory(inventory.write(tmp_path / "lab.yml", text))
    assert [m.hosts for m in inv.served_models()] == [("ci1",), ("ci1",), ("ci1",)]
