"""What a serving profile reads from a model's weights folder: config.json and the chat template.

config.json gives the architecture (`architectures`, else `model_type`), the quantization the
weights carry (`quantization_config`, which vLLM applies by itself: vllm/config/model.py
`_verify_quantization` takes its `quant_method` when no `--quantization` is given) and the MTP
layers (`num_nextn_predict_layers`). The chat template (tokenizer_config.json's
`chat_template`, or `chat_template.jinja` beside it, where newer tokenizers keep it) shows which
reasoning and tool-call markers the model was trained to write.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# DeepSeek's markers (its tokenizer's special tokens; the bars are U+FF5C, the spaces U+2581).
THINK = "<think>"
TOOL_CALLS = "<\uff5ctool\u2581calls\u2581begin\uff5c>"
# V3 and R1 fence a tool call's arguments in ```json; V3.1 writes them bare after the name.
FENCED_ARGUMENTS = "```json"


@dataclass(frozen=True)
class Checkpoint:
    """The facts of one weights folder; `error` says why they could not be read (then empty)."""

    path: Path
    architectures: tuple[str, ...] = ()
    model_type: str = ""
    quantization: dict[str, Any] = field(default_factory=dict)  # config.json quantization_config
    mtp_layers: int = 0  # num_nextn_predict_layers
    template: str = ""  # the chat template(s), joined
    template_file: str = ""  # where the template was read, for messages
    error: str = ""

    @property
    def architecture(self) -> str:
        return self.architectures[0] if self.architectures else ""

    @property
    def quant_method(self) -> str:
        return str(self.quantization.get("quant_method", ""))

    def describe_architecture(self) -> str:
        """`architectures [DeepseekV3ForCausalLM]`, or the model_type, for messages."""
        if self.architectures:
            return f"architectures [{', '.join(self.architectures)}]"
        return f"model_type {self.model_type}" if self.model_type else "no architectures or model_type"


def _template(path: Path) -> tuple[str, str]:
    """(template text, file) from tokenizer_config.json or chat_template.jinja; ("", "") if none.
    A template list (named templates) is read as all of them together."""
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8", errors="replace"), jinja.name
    try:
        given = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template")
    except (OSError, ValueError, AttributeError):
        return "", ""
    if isinstance(given, list):
        given = "\n".join(str(t.get("template", "")) for t in given if isinstance(t, dict))
    return (given, "tokenizer_config.json") if isinstance(given, str) and given else ("", "")


def read(path: Path) -> Checkpoint:
    """The checkpoint at `path` (a weights folder holding config.json)."""
    config = path / "config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except OSError as exc:
        return Checkpoint(path, error=f"cannot read {config} ({exc.strerror or exc})")
    except ValueError as exc:
        return Checkpoint(path, error=f"{config} is not valid JSON ({exc})")
    if not isinstance(data, dict):
        return Checkpoint(path, error=f"{config} is not a JSON object")
    archs = data.get("architectures")
    quant = data.get("quantization_config")
    layers = data.get("num_nextn_predict_layers")
    template, template_file = _template(path)
    return Checkpoint(
        path,
        architectures=tuple(a for a in archs if isinstance(a, str)) if isinstance(archs, list) else (),
        model_type=str(data.get("model_type") or ""),
        quantization=dict(quant) if isinstance(quant, dict) else {},
        mtp_layers=layers if isinstance(layers, int) and not isinstance(layers, bool) and layers > 0 else 0,
        template=template,
        template_file=template_file,
    )
