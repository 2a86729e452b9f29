"""Render Ansible's inventory and group_vars from the typed inventory (never hand-kept)."""

import shlex
from pathlib import Path
from typing import Any

import yaml

from installer import engines, metrics_token, redis_auth
from installer.bundle import layout, os_packages
from installer.bundle.manifest import Manifest
from installer.bundle.push import host_dir
from installer.gpu import matrix as gpu_matrix
from installer.inventory import Host, Inventory
from installer.ssh import known_hosts_option, target
from installer.tls import store as tls_store
from installer.topology import cross_host, redis_host, serving_hosts

# Layout on every host (docs/architecture.md, "On each host").
HOST_LAYOUT = {
    "pli_user": "private-llm",
    "pli_root": "/opt/private-llm",
    "pli_config_dir": "/etc/private-llm",
    "pli_state_dir": "/var/lib/private-llm",
    "pli_cache_dir": "/var/cache/private-llm",
    "pli_tls_dir": "/etc/private-llm/tls",
}


def hosts_yaml(inv: Inventory, man: Manifest | None = None) -> dict[str, Any]:
    hosts: dict[str, dict[str, Any]] = {}
    groups: dict[str, dict[str, Any]] = {}
    for host in inv.hosts:
        t = target(inv, host)
        ssh_args = ["-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes"]
        if t.known_hosts:
            ssh_args += ["-o", known_hosts_option(t.known_hosts)]
        entry: dict[str, Any] = {
            "ansible_host": t.address,
            "ansible_user": t.user,
            "ansible_port": t.port,
            # Ansible shlex-splits this: quoted, a path with a space stays one argument.
            "ansible_ssh_common_args": shlex.join(ssh_args),
        }
        if t.private_key:
            entry["ansible_ssh_private_key_file"] = str(t.private_key)
        if man is not None:
            # Per host: each installs the OS packages of its own groups and target
            # (bundle/os_packages.py), from its own target's files of the bundle (bundle/layout.py).
            os_target = inv.host_target(host)
            entry["common_packages"] = os_packages.for_host(man.packages, _package_groups(inv, host), os_target)
            entry.update(layout.host_vars(inv, man, os_target))
        entry.update(_network_host_vars(inv, host))
        entry.update(_engine_host_vars(inv, host))
        hosts[host.name] = entry
        for group in inv.host_groups(host):
            groups.setdefault(group, {"hosts": {}})["hosts"][host.name] = {}
    return {"all": {"hosts": hosts, "children": groups}}


def group_vars(inv: Inventory, man: Manifest, keys_json: str) -> dict[str, Any]:
    """Variables for every host. keys_json holds key hashes and limits only, never a secret."""
    engine = inv.engine
    return {
        **HOST_LAYOUT,
        "pli_deployment": inv.deployment,
        "pli_bundle_dir": host_dir(man),
        "pli_release_id": man.release_id,
        "model_served_name": inv.model.served_name,
        # The weights' folder under models/ on the hosts ('/' in the name would nest folders).
        # Roles of revisions made before it build the folder from the served name themselves.
        "model_dir_name": inv.model.dir_name,
        "engine_device": engine.device,
        # GPU roles: driver branch per GPU generation for the CUDA version (installer/gpu/matrix.py)
        **gpu_matrix.group_vars(
            inv.gpu.cuda, pin=inv.gpu.driver_branch,
            gate_share=inv.gpu.gate.min_share, gate_waive=inv.gpu.gate.waive,
        ),
        "nvidia_driver_allow_reboot": inv.gpu.reboot == "allow",
        "engine_served_model_name": inv.model.served_name,
        "engine_model_dir_name": inv.model.dir_name,
        "engine_port": inv.ports.engine,
        "engine_max_model_len": engine.max_model_len,
        "engine_max_num_seqs": engine.max_num_seqs,
        "engine_gpu_memory_utilization": engine.gpu_memory_utilization,
        "engine_tensor_parallel_size": engine.tensor_parallel_size,
        "engine_cpu_kvcache_space_gib": engine.cpu_kvcache_space_gib,
        "engine_cpu_omp_threads_bind": engine.cpu_omp_threads_bind,
        "engine_extra_args": list(engine.extra_args),
        "gateway_port": inv.ports.gateway,
        # Each gateway routes to the engine on its own host, which stays on loopback.
        "gateway_engines": gateway_engines(inv),
        "gateway_keys_json": keys_json,
        "gateway_max_in_flight": inv.gateway.max_in_flight,
        "gateway_max_body_bytes": inv.gateway.max_body_bytes,
        "gateway_max_connections_per_client": inv.gateway.max_connections_per_client,
        "gateway_upstream_timeout_s": inv.gateway.upstream_timeout_s,
        "gateway_drain_timeout_s": inv.gateway.drain_timeout_s,
        "gateway_workers": inv.gateway.workers,
        "gateway_docs": inv.gateway.docs,
        # The gateways ask Prometheus for it on /metrics; a path on this machine, never the
        # token: the roles read it in no_log tasks. write() makes the file.
        "pli_metrics_token_src": str(metrics_token.token_file(inv.deployment)),
        "healthcheck_model": inv.model.served_name,
        **_tls_vars(inv),
        **_redis_vars(inv),
        **_monitoring_vars(inv),
    }


def _url(scheme: str, address: str, port: int) -> str:
    return f"{scheme}://[{address}]:{port}" if ":" in address else f"{scheme}://{address}:{port}"


def engine_url(inv: Inventory, host: Host, port: int | None = None) -> str:
    """A host's engine (the first, or the one on `port`) as gateways and the host's checks reach it."""
    port = port or inv.ports.engine
    if not cross_host(inv):
        return _url("http", "127.0.0.1", port)
    return _url("http" if inv.tls.mode == "off" else "https", host.address, port)


def gateway_engines(inv: Inventory) -> list[dict[str, str]]:
    """The engines each gateway routes to (and relays /metrics of, for Prometheus): all of the
    deployment's, least outstanding first (service/routing.py)."""
    return [
        {"name": name, "url": engine_url(inv, host, port), "model": inv.model.served_name}
        for host in serving_hosts(inv)
        for name, port in _engines_of(inv, host)
    ]


def _package_groups(inv: Inventory, host: Host) -> list[str]:
    groups = inv.host_groups(host)
    return [*groups, "redis"] if host is redis_host(inv) else groups


def _redis_vars(inv: Inventory) -> dict[str, Any]:
    host = redis_host(inv)
    if host is None:
        return {"redis_host": "", "gateway_redis_url": ""}
    on = inv.tls.mode != "off"
    address = f"[{host.address}]" if ":" in host.address else host.address
    password_file = redis_auth.ensure_password(inv.deployment)
    return {
        "redis_host": host.name,
        "redis_bind_address": host.address,
        "redis_port": inv.ports.redis,
        "redis_tls": on,
        "redis_password_file": str(password_file),
        # A template, evaluated by Ansible in no_log tasks only: the password is never written
        # into this run directory. rediss:// takes the gateway's own certificate and CA.
        "gateway_redis_url": (
            f"{'rediss' if on else 'redis'}://:{{{{ lookup('ansible.builtin.file', redis_password_file) }}}}"
            f"@{address}:{inv.ports.redis}/0"
        ),
    }


def _tls_vars(inv: Inventory) -> dict[str, Any]:
    on = inv.tls.mode != "off"
    tls_dir = HOST_LAYOUT["pli_tls_dir"]
    engine_tls = on and cross_host(inv)
    return {
        "pli_tls_enabled": on,
        "pli_gateway_scheme": "https" if on else "http",
        "healthcheck_ca_file": f"{tls_dir}/ca.pem" if on else "",
        # Engines on the network accept only clients with a deployment certificate.
        "healthcheck_client_cert": f"{tls_dir}/server.pem" if engine_tls else "",
        "healthcheck_client_key": f"{tls_dir}/server.key" if engine_tls else "",
    }


def _engine_host_vars(inv: Inventory, host: Host) -> dict[str, Any]:
    """Per GPU host whose GPUs the inventory describes: its tuned engines and Ray service
    (installer/engines.py). Nothing otherwise: the engine role runs its one engine as always."""
    if engines.tuned(inv) is None:
        return {}
    ray = engines.ray_node(inv, host)
    return {
        "engine_instances": [e.as_vars() for e in engines.engine_instances(inv, host)],
        "engine_ray": ray.as_vars() if ray else {},
    }


def _network_host_vars(inv: Inventory, host: Host) -> dict[str, Any]:
    """Per host: where its engine listens, the URLs its checks use, and (paths on this
    machine, never contents) the certificate files the tls role sends it."""
    on = inv.tls.mode != "off"
    found: dict[str, Any] = {
        "engine_bind_address": host.address if cross_host(inv) else "127.0.0.1",
        "engine_tls": on and cross_host(inv),
        "healthcheck_url": engine_url(inv, host),
        # With TLS the gateway is checked by its certificate's address, as clients reach it.
        "healthcheck_gateway_url": _url(
            "https" if on else "http", host.address if on else "127.0.0.1", inv.ports.gateway
        ),
    }
    if on:
        files = tls_store.host_files(inv, host.name)
        found |= {"tls_ca_src": str(files.ca), "tls_cert_src": str(files.cert), "tls_key_src": str(files.key)}
    return found


def _monitoring_vars(inv: Inventory) -> dict[str, Any]:
    mon = inv.monitoring
    return {
        "monitoring_prometheus_port": mon.prometheus_port,
        "monitoring_retention": mon.retention,
        "monitoring_scrape_interval": mon.scrape_interval,
        "monitoring_ttft_p99_target_s": mon.ttft_p99_target_s,
        "monitoring_error_rate_max": mon.error_rate_max,
        "monitoring_alert_profile": mon.alert_profile,
        "monitoring_install_from": mon.install_from,
        "monitoring_webhook_url": mon.webhook_url or "",
        # Prometheus fetches each engine's metrics from the gateway on the engine's own host.
        "monitoring_engines": {h.name: engine_names(inv, h) for h in serving_hosts(inv)},
    }


def _engines_of(inv: Inventory, host: Host) -> list[tuple[str, int]]:
    """(name, port) of each engine the host runs (installer/engines.py): the first is named after
    the host, the others `<host>-<n>`; a Ray worker host runs none."""
    return [
        (host.name if e.name == "engine" else f"{host.name}-{e.name.removeprefix('engine-')}", e.port)
        for e in engines.engine_instances(inv, host)
    ]


def engine_names(inv: Inventory, host: Host) -> list[str]:
    """The names every gateway knows this host's engines by (routing, drains, metrics labels)."""
    return [name for name, _port in _engines_of(inv, host)]


def write(
    inv: Inventory, man: Manifest, dest: Path, keys_json: str, extra_vars: dict[str, Any] | None = None
) -> Path:
    """Write hosts.yml and group_vars/all.yml under dest; return the inventory directory."""
    metrics_token.ensure_token(inv.deployment)  # what the roles' file lookup reads
    inv_dir = dest / "inventory"
    (inv_dir / "group_vars").mkdir(parents=True, exist_ok=True)
    (inv_dir / "hosts.yml").write_text(yaml.safe_dump(hosts_yaml(inv, man), sort_keys=False))
    (inv_dir / "group_vars" / "all.yml").write_text(
        "# rendered by installer from the inventory file; edit that file instead\n"
        + yaml.safe_dump({**group_vars(inv, man, keys_json), **(extra_vars or {})}, sort_keys=False)
    )
    return inv_dir
