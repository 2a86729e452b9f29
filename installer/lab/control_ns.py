"""A control network namespace on a lab's bridge: somewhere to run the installer with no route
anywhere but the lab hosts -- the control machine of an air-gapped site, in miniature.

    ns = control_ns.create("ci")          # pli-ci-ctl, 10.213.7.2/24, no default route
    subprocess.run(control_ns.run_argv("ci", ["installer", "up", ...]))
    control_ns.remove("ci")               # `installer lab down` removes it too

Named from the lab like everything else the lab creates (`pli-<lab>-ctl`, veth `plv-<lab>-ctl`),
so `lab down` and `leftovers()` find it without any state file.
"""

from dataclasses import dataclass

from installer.base.errors import LabError
from installer.base.paths import control_socket_dir
from installer.base.procs import run
from installer.lab import network, processes, state
from installer.lab.naming import parse_subnet, validate_name

CONTROL_NS_OFFSET = 2  # .1 is this machine on the bridge, hosts start at .11


@dataclass(frozen=True)
class ControlNamespace:
    name: str
    veth: str
    address: str
    subnet: str


def _ip(*args: str) -> None:
    run(["ip", *args])


def netns_name(lab: str) -> str:
    return f"pli-{validate_name(lab)}-ctl"


def veth_name(lab: str) -> str:
    return f"plv-{validate_name(lab)}-ctl"  # at most 14 characters (IFNAMSIZ - 1 is 15)


def create(lab: str) -> ControlNamespace:
    """Make the lab's control namespace: one address on the lab subnet, loopback, no other route."""
    st = state.load(lab)
    if st is None:
        raise LabError(f"lab {lab!r} is not up: run `installer lab up --name {lab}` first")
    net = parse_subnet(st.subnet)
    ns = ControlNamespace(
        netns_name(lab), veth_name(lab), str(net.network_address + CONTROL_NS_OFFSET), str(net)
    )
    if leftovers(lab):
        raise LabError(f"the control namespace {ns.name} already exists: remove it first")
    try:
        _ip("netns", "add", ns.name)
        _ip("link", "add", ns.veth, "type", "veth", "peer", "name", "eth0", "netns", ns.name)
        _ip("link", "set", "dev", ns.veth, "master", st.bridge, "up")
        _ip("-n", ns.name, "addr", "add", f"{ns.address}/{net.prefixlen}", "dev", "eth0")
        _ip("-n", ns.name, "link", "set", "dev", "lo", "up")
        _ip("-n", ns.name, "link", "set", "dev", "eth0", "up")
    except BaseException:
        remove(lab)
        raise
    return ns


def run_argv(lab: str, argv: list[str]) -> list[str]:
    """A command line that runs `argv` inside the control namespace, with a private, empty
    directory for Ansible's SSH control sockets.

    That keeps SSH connection sharing honest: a control socket another process opened from
    outside the namespace would otherwise carry this process's connections over a route it does
    not have. Only that directory is hidden, not all of /tmp: the project (and its venv) may
    itself live under /tmp, as in a CI clone.
    """
    control_dir = control_socket_dir()
    script = (
        f"mkdir -p {control_dir} && mount -t tmpfs -o mode=0700 pli-ctl-cp {control_dir} "
        '&& exec "$@"'
    )
    return [
        "ip",
        "netns",
        "exec",
        netns_name(lab),
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
        *argv,
    ]


def remove(lab: str) -> None:
    """Stop what runs in the control namespace (by PID), then delete its veth and namespace."""
    ns, veth = netns_name(lab), veth_name(lab)
    processes.kill_pids(processes.pids_in_netns(network.NETNS_DIR / ns))
    network.delete_link(veth)
    network.delete_netns(ns)


def leftovers(lab: str) -> list[str]:
    """The control namespace's parts still present (empty when there is none)."""
    ns, veth = netns_name(lab), veth_name(lab)
    found = []
    if ns in network.netns_names():
        found.append(f"network namespace {ns}")
        pids = processes.pids_in_netns(network.NETNS_DIR / ns)
        if pids:
            found.append(f"{len(pids)} processes in network namespace {ns} (e.g. PID {pids[0]})")
    if veth in network.links():
        found.append(f"network link {veth}")
    return found
