"""The files a checkpoint is made of: JSON configs, and safetensors in the dtypes numpy lacks;
and the seeded draw its weights come from.

numpy has neither bfloat16 nor float8, and `safetensors.numpy` writes only numpy's dtypes, so the
DeepSeek checkpoints are written here: the safetensors format is an 8-byte little-endian header
length, a JSON header naming each tensor's dtype, shape and byte range, then the raw bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

# safetensors' dtype names, with their element sizes.
ITEMSIZE = {"F32": 4, "BF16": 2, "F8_E4M3": 1}


def normal_init(seed: int | list[int]) -> Callable[..., np.ndarray]:
    """normal(*shape): float32 tensors drawn from N(0, 0.02^2), these models' usual init, one
    seeded stream after another, so a seed makes the same checkpoint byte for byte."""
    rng = np.random.Generator(np.random.PCG64(seed))

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)).astype(np.float32)

    return normal


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


@dataclass(frozen=True)
class RawTensor:
    """A tensor as safetensors stores it: a dtype name, a shape and little-endian bytes."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes

    def __post_init__(self) -> None:
        if len(self.data) != int(np.prod(self.shape, dtype=np.int64)) * ITEMSIZE[self.dtype]:
            raise ValueError(f"{self.dtype}{list(self.shape)} does not match {len(self.data)} bytes")


def write_tokenizer(tmp: Path, tokenizer: Tokenizer, bos: str, eos: str, pad: str, max_positions: int,
                    chat_template: str) -> tuple[int, int]:
    """tokenizer.json and tokenizer_config.json of a checkpoint as transformers writes them;
    the (bos, eos) ids."""
    bos_id, eos_id = tokenizer.token_to_id(bos), tokenizer.token_to_id(eos)
    assert bos_id is not None and eos_id is not None  # they are the trainer's special tokens
    (tmp / "tokenizer.json").write_text(tokenizer.to_str(pretty=True) + "\n")
    write_json(tmp / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": eos,
        "pad_token": pad,
        "model_max_length": max_positions,
        "clean_up_tokenization_spaces": False,
        "chat_template": chat_template,
    })
    return bos_id, eos_id


def config_ids_and_dtype(bos_id: int, eos_id: int, dtype: str) -> dict[str, Any]:
    """The part of config.json every checkpoint here writes alike: untied embeddings, the
    special tokens' ids, and the dtype under both names ("dtype" is the transformers>=4.56 name,
    "torch_dtype" the older one)."""
    return {
        "tie_word_embeddings": False,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "initializer_range": 0.02,
        "use_cache": True,
        "dtype": dtype,
        "torch_dtype": dtype,
    }


def write_generation_config(tmp: Path, bos_id: int, eos_id: int) -> None:
    write_json(tmp / "generation_config.json", {"bos_token_id": bos_id, "eos_token_id": eos_id, "max_new_tokens": 64})


def f32(values: np.ndarray) -> RawTensor:
    return RawTensor("F32", values.shape, values.astype("<f4").tobytes())


def bf16(values: np.ndarray) -> RawTensor:
    """float32 -> bfloat16 (the top 16 bits), rounded to nearest even; the values are finite."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return RawTensor("BF16", values.shape, rounded.astype("<u2").tobytes())


def f8_e4m3(codes: np.ndarray) -> RawTensor:
    """float8_e4m3fn codes (installer/modelmaker/fp8.py), one byte each."""
    return RawTensor("F8_E4M3", codes.shape, codes.astype(np.uint8).tobytes())


def write_safetensors(path: Path, tensors: dict[str, RawTensor], metadata: dict[str, str]) -> None:
    # As safetensors' own writer: larger elements first, then by name, so each tensor starts at a
    # multiple of its element size (readers map the file and view it in place).
    order = sorted(tensors, key=lambda name: (-ITEMSIZE[tensors[name].dtype], name))
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for name in order:
        tensor = tensors[name]
        header[name] = {
            "dtype": tensor.dtype,
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(tensor.data)],
        }
        offset += len(tensor.data)
    encoded = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    with path.open("wb") as f:
        f.write(len(encoded).to_bytes(8, "little"))
        f.write(encoded)
        for name in order:
            f.write(tensors[name].data)
