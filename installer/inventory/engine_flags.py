"""The vLLM flags the installer writes into every engine's command line, which engine.extra_args
may not set.

engines.vllm_argv writes each engine's flags from the inventory (its weights and served name, the
address and port the gateways reach it on, its sizing and task, the TLS that admits only the
gateways) and puts extra_args last, where vLLM's argparse lets a repeated flag win. Repeated
there, such a flag would quietly replace what the plan, the gateways and `installer plan` rely
on, so the loader refuses it at its file:line and names the setting that changes it instead.

vLLM reads a flag in more spellings than its own (vllm/utils/argparse_utils.py: its
FlexibleArgumentParser is an argparse parser with allow_abbrev left on): `--flag=value`, `_` for
`-` (`--ssl_cert_reqs`), any unambiguous start of a long flag (`--ssl-cert`), `--flag.key value`
(a field of a JSON flag), and the short aliases (`-tp`, abbreviated too: `-t`; `-q` with its
value attached: `-qfp8`). `owned_flag` reads an item the same ways.
"""

from __future__ import annotations

_TLS = (
    "set tls (mode, certificates): an engine on the network admits only the gateways' client "
    "certificates"
)
_LAYOUT = (
    "describe the GPUs (gpu.type, gpu.count) and let the tuner lay the model out: every engine's "
    "GPUs and hosts are the installer's"
)
_PROFILE = (
    "set the model's profile (model.profile, models[].profile): the serving profile writes it "
    "(docs/deepseek.md#serving-profiles)"
)

# Every flag vllm_argv writes (itself, or the tuner's flags it passes on), with how to change it
# instead. vllm_argv refuses to write a flag that is neither here nor in LEFT_TO_EXTRA_ARGS, so a
# flag added to the writer is classified on purpose, never missed here.
WRITTEN: dict[str, str] = {
    "--model": "set model.path (models[].path): the installer copies the weights to the hosts "
               "and points the engine at its copy",
    "--served-model-name": "set model.served_name (models[].served_name): the gateways route by it",
    "--host": "set the host's address (hosts[].address): an engine listens on it when gateways on "
              "other hosts reach it, otherwise on 127.0.0.1",
    "--port": "set ports.engine: the gateways and health checks reach the engines there",
    "--max-model-len": "set engine.max_model_len",
    "--max-num-seqs": "set engine.max_num_seqs",
    "--gpu-memory-utilization": "set engine.gpu_memory_utilization: the plan checks that models "
                                "sharing a GPU fit it",
    "--tensor-parallel-size": "set engine.tensor_parallel_size (with gpu.type and gpu.count, the "
                              "tuner chooses it)",
    "--quantization": "set engine.quantization (a quantized checkpoint needs no flag)",
    "--pipeline-parallel-size": _LAYOUT,
    "--distributed-executor-backend": _LAYOUT,
    "--runner": "set the model's task (models[].task): the gateways send each task its own requests",
    "--convert": "set the model's task (models[].task): the gateways send each task its own requests",
    "--reasoning-parser": _PROFILE + "; a model's reasoning_parser overrides it",
    "--tool-call-parser": _PROFILE + "; a model's tool_call_parser overrides it",
    "--enable-auto-tool-choice": _PROFILE + "; it comes with the model's tool_call_parser",
    "--speculative-config": _PROFILE + "; a model's mtp_tokens sets MTP speculative decoding (0: off)",
    "--ssl-certfile": _TLS,
    "--ssl-keyfile": _TLS,
    "--ssl-ca-certs": _TLS,
    "--ssl-cert-reqs": _TLS,
    "--ssl-ciphers": _TLS,
    "--enable-ssl-refresh": _TLS,
    "--otlp-traces-endpoint": "set monitoring.otlp_endpoint: the engines then export over OTLP/HTTP to the "
                              "collector the gateways export to, under the gateways' spans",
}

# Not written, but each would undo one of the flags above.
UNDOING: dict[str, str] = {
    "--no-enable-ssl-refresh": _TLS,
    "--api-key": "keep API keys at the gateways (`installer keys`): an engine's port admits the "
                 "gateways, which send it no key",
    "--uds": "set ports.engine: on a Unix socket vLLM ignores --host and --port, and the gateways "
             "could not reach it",
    "--config": "write the flags into extra_args themselves: a vLLM config file on the host could "
                "set any flag the installer writes, unchecked",
    "--data-parallel-size": _LAYOUT,
    "--no-enable-auto-tool-choice": _PROFILE,
    "--spec-method": _PROFILE + "; a model's mtp_tokens sets MTP speculative decoding",
    "--spec-model": _PROFILE + "; a model's mtp_tokens sets MTP speculative decoding",
    "--spec-tokens": _PROFILE + "; a model's mtp_tokens sets MTP speculative decoding",
    "--no-enforce-eager": "leave eager mode to engine.device: a CPU engine runs eager (its host has "
                          "no compiler), a GPU engine compiles as vLLM does by default",
}

OWNED: dict[str, str] = {**WRITTEN, **UNDOING}

# vLLM's short aliases of owned flags (vllm/engine/arg_utils.py).
SHORT: dict[str, str] = {
    "-tp": "--tensor-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-dp": "--data-parallel-size",
    "-q": "--quantization",
    "-sc": "--speculative-config",
}

# Written by vllm_argv, yet left to extra_args on purpose: --enforce-eager only asks for what CPU
# engines have already, and the rest are the tuner's throughput choices on declared GPUs, which
# no inventory setting makes (CPU and undescribed GPU engines never get them, and an operator may
# measure better ones: docs/benchmarks.md adds --max-num-batched-tokens to the tuner's flags).
LEFT_TO_EXTRA_ARGS = frozenset({
    "--enforce-eager",
    "--enable-prefix-caching",
    "--kv-cache-dtype",
    "--max-cudagraph-capture-size",
    "--max-num-batched-tokens",
})


def _long_name(item: str) -> str:
    """`--ssl_cert_reqs=0` -> `--ssl-cert-reqs`: the flag name vLLM looks up (what precedes '=',
    and '.', with '_' read as '-')."""
    name = item.split("=", 1)[0].split(".", 1)[0]
    return "--" + name[2:].replace("_", "-")


def _owned_long(item: str) -> str | None:
    name = _long_name(item)
    if len(name) <= 2:
        return None  # `--` ends the options; vLLM reads nothing after it as a flag
    if name in OWNED:
        return name
    # argparse takes an unambiguous start for the whole flag; an ambiguous one fails in vLLM anyway
    return next((flag for flag in sorted(OWNED) if flag.startswith(name)), None)


def _owned_short(item: str) -> str | None:
    name = item.split("=", 1)[0]
    if name in SHORT:
        return SHORT[name]
    for alias, flag in SHORT.items():
        if "=" not in item and alias.startswith(item):  # an abbreviation: -t for -tp
            return flag
        if len(alias) == 2 and item.startswith(alias):  # a one-letter alias with its value: -qfp8
            return flag
    return None


def owned_flag(item: str) -> str | None:
    """The installer's flag vLLM would read the extra_args item `item` as; None for any other."""
    if item.startswith("--"):
        return _owned_long(item)
    if len(item) >= 2 and item[0] == "-" and not item[1].isdigit():  # not a negative number
        return _owned_short(item)
    return None


def problem(item: str) -> str | None:
    """What is wrong with the extra_args item `item` and what to do instead; None when vLLM would
    read it as no flag of the installer's."""
    flag = owned_flag(item)
    if flag is None:
        return None
    said = f"{flag} is" if item == flag else f"vLLM reads {item!r} as {flag}, which is"
    return f"{said} set by the installer; remove it from extra_args and {OWNED[flag]}"


def unclassified(argv: list[str]) -> list[str]:
    """The flags of a product-written argv that are neither OWNED nor LEFT_TO_EXTRA_ARGS (values
    never start with '-': paths, names, numbers and cipher lists)."""
    return [a for a in argv if a.startswith("--") and a not in OWNED and a not in LEFT_TO_EXTRA_ARGS]
