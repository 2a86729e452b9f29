"""NCCL all-reduce bus bandwidth between the ranks torchrun's variables name (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT), as nccl-tests reports it: busbw = size / time x 2(n-1)/n.
ray_two_hosts.sh starts one rank in each container host, so the path is the one vLLM's pipeline
send/recv takes between them (NCCL's socket transport over the veth, NCCL_SOCKET_IFNAME=eth0), or
two ranks in one host (NVLink or PCIe). Runs with the image's torch; reads from stdin is fine."""

import os
import time

import torch
import torch.distributed as dist

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
dist.init_process_group("nccl")
print(f"rank {rank}/{world} on {os.uname().nodename}, GPU {torch.cuda.get_device_name()}", flush=True)
best = 0.0
for mib in (1, 16, 64, 256):
    x = torch.ones(mib * 2**20 // 2, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):  # warm-up: NCCL connects on the first call
        dist.all_reduce(x)
    torch.cuda.synchronize()
    iters = 20
    t = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    took = (time.perf_counter() - t) / iters
    bus = mib * 2**20 / took * 2 * (world - 1) / world / 1e9
    best = max(best, bus)
    print(f"size {mib} MiB: {took * 1e6:.0f} us, algbw {mib * 2**20 / took / 1e9:.2f} GB/s, "
          f"busbw {bus:.2f} GB/s", flush=True)
print(f"busbw {best:.2f} GB/s (largest of the sizes, {world} ranks)", flush=True)
dist.destroy_process_group()
