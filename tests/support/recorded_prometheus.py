"""Prometheus answers recorded for the release controller's tests
(tests/unit/release/data/prometheus/<name>.json, keyed `<window s>|<what>`), replayed as the
controller's query function: each PromQL the controller asks is matched to the query
service/release_promql.py writes for that window and figure; anything else gets an empty vector."""

import json
from pathlib import Path
from typing import Any

from service import release_promql

RECORDED = Path(__file__).parent.parent / "unit" / "release" / "data" / "prometheus"
EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}


def answers(name: str, served_name: str = "tiny-llama") -> release_promql.Query:
    recorded = json.loads((RECORDED / f"{name}.json").read_text())

    def query(promql: str) -> dict[str, Any]:
        for key, answer in recorded.items():
            w, what = key.split("|")
            want = (release_promql.requests_query(served_name, float(w)) if what == "requests"
                    else release_promql.quantile_query(served_name, what, float(w)))
            if want == promql:
                return answer  # type: ignore[no-any-return]
        return EMPTY

    return query
