"""With redis.replicas the release controller's settings name the sentinels, and its client
follows the primary through them (service/redis_connect.py); without, the file is as before."""

import json

import jinja2

from service.release_controller import redis_client
from tests.support.monitoring_render import ROLE, role_vars

HOST = {"inventory_hostname": "gw"}


def _settings(**extra: object) -> dict:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROLE / "templates"), undefined=jinja2.StrictUndefined,
                             trim_blocks=True)
    env.filters["to_nice_json"] = lambda v: json.dumps(v, indent=4, sort_keys=True)
    text = env.get_template("release-controller.json.j2").render(
        **role_vars(gateway_redis_url="rediss://:pw@10.0.0.1:6379/0", pli_tls_dir="/etc/private-llm/tls",
                    **HOST, **extra))
    return json.loads(text)


def test_the_controller_follows_the_sentinels_when_there_are_some() -> None:
    assert "redis_sentinels" not in _settings()
    settings = _settings(gateway_redis_sentinels=["10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"])
    assert settings["redis_sentinels"] == ["10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"]
    pool = redis_client(settings).connection_pool
    assert pool.service_name == "pli" and len(pool.sentinel_manager.sentinels) == 3
    assert pool.connection_kwargs["ssl_ca_certs"] == "/etc/private-llm/tls/ca.pem"
