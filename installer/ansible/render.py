"""Ansible's inventory and group_vars, serialised from the deployment plan (installer/planning/plan.py).

Nothing is decided here: topology, engines and their argv come from the plan, settings from
the inventory it was built from. Rendering writes no secret: the Redis password and the scrape
token are files on this machine, made by the flows before rendering, that the roles read with
file lookups in no_log tasks.
"""

import shlex
from pathlib import Path
from typing import Any

import yaml

from installer.ansible import keepalived_vars, redis_ha_vars
from installer.bundle import layout, os_packages, weights_fanout
from installer.bundle.manifest import Manifest
from installer.bundle.push import host_dir
from installer.gpu import matrix as gpu_matrix
from installer.gpu import ray_ports
from installer.hosts.ssh import target
from installer.inventory import Host, Inventory, jwks_file
from installer.planning.plan import DeploymentPlan, HostPlan
from installer.secrets import keys, secret_files
from installer.tls import store as tls_store


def _connection(inv: Inventory, host: Host) -> dict[str, Any]:
    t = target(inv, host)
    ssh_args = t.checked_options()
    entry: dict[str, Any] = {
        "ansible_host": t.address,
        "ansible_user": t.user,
        "ansible_port": t.port,
        # Ansible shlex-splits this: quoted, a path with a space stays one argument.
        "ansible_ssh_common_args": shlex.join(ssh_args),
    }
    if t.private_key:
        entry["ansible_ssh_private_key_file"] = str(t.private_key)
    return entry


def targets_yaml(inv: Inventory) -> dict[str, Any]:
    """How to reach each host and its groups, nothing else (uninstall needs no plan)."""
    groups: dict[str, dict[str, Any]] = {}
    for host in inv.hosts:
        for group in inv.host_groups(host):
            groups.setdefault(group, {"hosts": {}})["hosts"][host.name] = {}
    return {"all": {"hosts": {h.name: _connection(inv, h) for h in inv.hosts}, "children": groups}}


def hosts_yaml(plan: DeploymentPlan, man: Manifest | None = None) -> dict[str, Any]:
    inv = plan.inventory
    found = targets_yaml(inv)
    # model.distribute: fanout: what each host fetches from the others, and serves them
    fanout_vars = {} if man is None else weights_fanout.host_vars(
        inv, man, host_dir(man), str(secret_files.fanout_token_file(inv.deployment)))
    for hp in plan.hosts:
        entry = found["all"]["hosts"][hp.name]
        if man is not None:
            # Per host: each installs the OS packages of its own groups and target
            # (bundle/os_packages.py), from its own target's files of the bundle (bundle/layout.py).
            os_target = inv.host_target(next(h for h in inv.hosts if h.name == hp.name))
            entry["common_packages"] = os_packages.for_host(man.packages, list(hp.package_groups), os_target)
            entry.update(layout.host_vars(inv, man, os_target))
        entry.update(_network_host_vars(inv, hp))
        if man is not None:
            entry.update(fanout_vars.get(hp.name, {}))
        entry.update(_engine_host_vars(hp))
        if "serving" in hp.groups:
            entry.update(keepalived_vars.host_vars(plan, hp.gateway_url))
    return found


def group_vars(plan: DeploymentPlan, man: Manifest) -> dict[str, Any]:
    """Variables for every host. The key files hold key hashes and limits only, never a secret."""
    inv = plan.inventory
    store = keys.load()  # today's keys, whatever the revision: one read for the three key files
    engine = inv.engine
    return {
        **plan.layout,
        "pli_deployment": inv.deployment,
        "pli_bundle_dir": host_dir(man),
        "pli_release_id": man.release_id,
        "model_served_name": inv.model.served_name,
        # The weights' folder under models/ on the hosts ('/' in the name would nest folders).
        # Roles of revisions made before it build the folder from the served name themselves.
        "model_dir_name": inv.model.dir_name,
        # Every weights folder the hosts hold, each with the hosts that serve it (the model role):
        # [{name, served_name, dir_name, task, stage, hosts}] (installer/planning/plan.py weights()).
        "models": plan.weights(),
        "engine_device": engine.device,
        # GPU roles: driver branch per GPU generation for the CUDA version (installer/gpu/matrix.py)
        **gpu_matrix.group_vars(
            inv.gpu.cuda, pin=inv.gpu.driver_branch,
            gate_share=inv.gpu.gate.min_share, gate_waive=inv.gpu.gate.waive,
        ),
        "nvidia_driver_allow_reboot": inv.gpu.reboot == "allow",
        "engine_served_model_name": inv.model.served_name,
        "engine_model_dir_name": inv.model.dir_name,
        # The engine_* sizing below is read only by the engine roles of revisions made before the
        # argv moved into the plan (a rollback configures with that revision's roles); today's
        # role runs each engine's argv from engine_instances as it is.
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
        # with each engine's task (the routes that reach it) and stage (a gray release's split)
        "gateway_engines": [
            {"name": u.name, "url": u.url, "model": u.model, "task": u.task, "stage": u.stage,
             "max_model_len": u.max_model_len,
             # only when off: a deployment that leaves it on renders the variables it did before
             **({} if u.resume_streams else {"resume_streams": False}),
             # the model's family for resuming answers with reasoning (service/resume_families.py)
             **({"resume_family": u.resume_family} if u.resume_family else {})}
            for u in plan.upstreams
        ],
        "gateway_keys_json": keys.render_hosts_file(store),
        # Apart from keys.json, whose schema earlier gateways read (service/keyfile.py)
        "gateway_quotas_json": keys.render_quotas_file(store),
        "gateway_key_roles_json": keys.render_roles_file(store),
        "gateway_max_in_flight": inv.gateway.max_in_flight,
        "gateway_max_body_bytes": inv.gateway.max_body_bytes,
        "gateway_max_connections_per_client": inv.gateway.max_connections_per_client,
        "gateway_upstream_timeout_s": inv.gateway.upstream_timeout_s,
        "gateway_drain_timeout_s": inv.gateway.drain_timeout_s,
        "gateway_workers": inv.gateway.workers,
        "gateway_docs": inv.gateway.docs,
        # the gateways' tracing section (the engines' flag is in their argv: installer/planning/engines.py)
        "gateway_otlp_endpoint": inv.monitoring.otlp_endpoint or "",
        "gateway_trace_sample_ratio": inv.monitoring.trace_sample_ratio,
        # The gateways ask Prometheus for it on /metrics; a path on this machine, never the
        # token: the roles read it in no_log tasks. write() makes the file.
        "pli_metrics_token_src": str(secret_files.metrics_token_file(inv.deployment)),
        "healthcheck_model": inv.model.served_name,
        # A model spanning hosts: its Ray cluster's token (a path here; the engine role copies it
        # no_log). Only then, so other deployments keep their variables digest.
        **({"engine_ray_token_src": str(secret_files.ray_token_file(inv.deployment))}
           if any(h.ray is not None for h in plan.hosts) else {}),
        **_tls_vars(plan),
        **_jwt_vars(plan),
        **_tenant_vars(plan),
        **_redis_vars(plan),
        **redis_ha_vars.group_vars(plan),
        **_monitoring_vars(plan),
        **keepalived_vars.group_vars(plan),
    }


def _jwt_vars(plan: DeploymentPlan) -> dict[str, Any]:
    """auth.jwt for the gateways: the settings, the JWKS file's usable public keys (content: public
    keys only, checked again here), and the path on this machine of the JWKS URL's CA bundle."""
    jwt = plan.inventory.auth.jwt
    if jwt is None:
        return {"gateway_jwt": {}, "gateway_jwks_json": "", "gateway_jwks_ca_src": ""}
    return {
        "gateway_jwt": {
            "issuers": list(jwt.issuers), "audiences": list(jwt.audiences), "algorithms": list(jwt.algorithms),
            "clock_skew_s": jwt.clock_skew_s, "jwks_url": jwt.jwks_url or "", "jwks_refresh_s": jwt.jwks_refresh_s,
        },
        "gateway_jwks_json": jwks_file.public_document(plan.inventory),
        "gateway_jwks_ca_src": str(jwt.jwks_ca) if jwt.jwks_ca else "",
    }


def _tenant_vars(plan: DeploymentPlan) -> dict[str, Any]:
    """auth.tenants for the gateways' `tenants` section (service/config.py, TenantsConfig; {}:
    none), and audit's per-request trail (`request_audit`; {}: none)."""
    auth, audit = plan.inventory.auth, plan.inventory.audit
    tenants: dict[str, Any] = {}
    if auth.tenants:
        tenants = {
            "claim": auth.tenant_claim, "default": auth.default_tenant,
            "tenants": [t.model_dump(mode="json", exclude_none=True) for t in auth.tenants],
        }
    request_audit: dict[str, Any] = (
        {"retention_days": audit.retention_days, "max_bytes_per_day": audit.max_mb_per_day << 20}
        if audit.requests
        else {}
    )
    if request_audit and audit.retain is not None:
        # service/config.py's RetainConfig; only when set, so the gateways' config is as before
        retain = audit.retain
        request_audit["retain"] = {
            "prompts": retain.prompts, "answers": retain.answers, "max_chars": retain.max_chars,
            "redact": [r.gateway() for r in retain.redact],
        }
    return {"gateway_tenants": tenants, "gateway_request_audit": request_audit}


def _redis_vars(plan: DeploymentPlan) -> dict[str, Any]:
    redis = plan.redis
    if redis is None:
        return {"redis_host": "", "gateway_redis_url": ""}
    on = redis.tls
    address = f"[{redis.address}]" if ":" in redis.address else redis.address
    return {
        "redis_host": redis.host,
        "gateway_redis_on_unavailable": plan.inventory.redis.on_unavailable,
        "redis_bind_address": redis.address,
        "redis_port": redis.port,
        "redis_tls": on,
        # made by the flow before rendering (secret_files.prepare)
        "redis_password_file": str(secret_files.redis_password_file(plan.inventory.deployment)),
        # A template, evaluated by Ansible in no_log tasks only: the password is never written
        # into this run directory. rediss:// takes the gateway's own certificate and CA.
        "gateway_redis_url": (
            f"{'rediss' if on else 'redis'}://:{{{{ lookup('ansible.builtin.file', redis_password_file) }}}}"
            f"@{address}:{redis.port}/0"
        ),
    }


def _tls_vars(plan: DeploymentPlan) -> dict[str, Any]:
    on = plan.inventory.tls.mode != "off"
    tls_dir = plan.layout["pli_tls_dir"]
    engine_tls = on and plan.cross_host
    return {
        "pli_tls_enabled": on,
        "pli_gateway_scheme": "https" if on else "http",
        "healthcheck_ca_file": f"{tls_dir}/ca.pem" if on else "",
        # Engines on the network accept only clients with a deployment certificate.
        "healthcheck_client_cert": f"{tls_dir}/server.pem" if engine_tls else "",
        "healthcheck_client_key": f"{tls_dir}/server.key" if engine_tls else "",
    }


def _engine_host_vars(hp: HostPlan) -> dict[str, Any]:
    """A serving host's engines, each with its whole argv, and its Ray service (installer/planning/engines.py);
    its gateway's processes where the plan resolved them (plan.gateway_workers: else the group's
    setting, "auto", which the gateway role sizes from nproc)."""
    if "serving" not in hp.groups:
        return {}
    workers = {} if hp.gateway_workers is None else {"gateway_workers": hp.gateway_workers}
    return {
        "engine_instances": [e.as_vars() for e in hp.engines],
        "engine_ray": hp.ray.as_vars() if hp.ray else {},
        **workers,
    }


def _network_host_vars(inv: Inventory, hp: HostPlan) -> dict[str, Any]:
    """Per host: where its engine listens, the URLs its checks use, and (paths on this
    machine, never contents) the certificate files the tls role sends it."""
    found: dict[str, Any] = {
        "engine_bind_address": hp.engine_bind_address,
        "engine_tls": hp.engine_tls,
        "healthcheck_url": hp.engine_url,
        "healthcheck_gateway_url": hp.gateway_url,
        "healthcheck_engines": list(hp.engine_names),
    }
    if inv.tls.mode != "off":
        files = tls_store.host_files(inv, hp.name)
        found |= {"tls_ca_src": str(files.ca), "tls_cert_src": str(files.cert), "tls_key_src": str(files.key)}
    return found


def _monitoring_vars(plan: DeploymentPlan) -> dict[str, Any]:
    mon = plan.inventory.monitoring
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
        "monitoring_engines": {h.name: list(h.engine_names) for h in plan.serving()},
        # A model spanning hosts: Prometheus scrapes its Ray head's autoscaler metrics.
        "monitoring_ray_heads": [h.name for h in plan.hosts if h.ray is not None and h.ray.role == "head"],
        "monitoring_ray_metrics_port": ray_ports.AUTOSCALER_METRIC_PORT,
    }


def write(
    plan: DeploymentPlan, man: Manifest, dest: Path, extra_vars: dict[str, Any] | None = None
) -> Path:
    """Write hosts.yml and group_vars/all.yml under dest; return the inventory directory."""
    secret_files.require(plan)  # what the roles' file lookups read: the flows made them, rendering never writes one
    inv_dir = dest / "inventory"
    (inv_dir / "group_vars").mkdir(parents=True, exist_ok=True)
    (inv_dir / "hosts.yml").write_text(yaml.safe_dump(hosts_yaml(plan, man), sort_keys=False))
    (inv_dir / "group_vars" / "all.yml").write_text(
        "# rendered by installer from the inventory file; edit that file instead\n"
        + yaml.safe_dump({**group_vars(plan, man), **(extra_vars or {})}, sort_keys=False)
    )
    return inv_dir
