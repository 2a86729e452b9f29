"""NVIDIA GPU hosts: driver/CUDA compatibility, fit planning, engine tuning and host checks.

- `matrix`  GPU generation <-> driver branch <-> CUDA version (which driver a host needs)
- `planner` does a model fit on some GPUs, and with which TP/PP/quantization
- `tuner`   vLLM settings for one host's GPUs: engines, CUDA_VISIBLE_DEVICES, pinning, flags
- `doctor`  checks run on a host (stdlib only; also shipped to hosts by the GPU roles)
"""
