"""Preflight: every check that runs on the hosts before any host changes, over SSH.

`hosts` probes each host (OS, Python, systemd, sudo, disk, memory, clock) and runs the GPU part
(`gpu`: what a GPU deployment needs, and the GPUs it finds); `ray_cluster` checks, once the plan is
laid out, that the hosts of a model spanning hosts can form its Ray cluster.
"""
