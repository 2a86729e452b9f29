"""float8_e4m3fn and DeepSeek-V3's 128x128 block quantization, in numpy (which has no float8).

e4m3fn (torch's `float8_e4m3fn`, safetensors' `F8_E4M3`): 1 sign bit, 4 exponent bits (bias 7),
3 mantissa bits, no infinities, NaN only at S.1111.111, so the largest finite value is 448.
The codes are uint8. Encoding rounds to nearest, ties to even, and saturates at +-448.

DeepSeek-V3's format (its `quantization_config`: fmt e4m3, weight_block_size [128, 128]): each
128x128 block of a weight has one float32 `weight_scale_inv`, and the real value is the fp8 value
times that scale. The scale is the block's largest magnitude over 448, so every block uses the
whole fp8 range.
"""

from __future__ import annotations

import numpy as np

E4M3_MAX = 448.0
BLOCK = 128


def _finite_magnitudes() -> np.ndarray:
    """The values of codes 0x00..0x7E, increasing with the code."""
    codes = np.arange(0x7F)
    exponent, mantissa = codes >> 3, codes & 7
    return np.where(
        exponent == 0,
        mantissa * 2.0**-9,  # subnormals
        (1 + mantissa / 8) * 2.0 ** (exponent - 7),
    )


_MAGNITUDES = _finite_magnitudes()


def e4m3_encode(values: np.ndarray) -> np.ndarray:
    """float32 -> e4m3fn codes (uint8); the values are finite."""
    magnitude = np.minimum(np.abs(values.astype(np.float64)), E4M3_MAX)
    upper = np.searchsorted(_MAGNITUDES, magnitude)  # the first code whose value is >= magnitude
    lower = np.maximum(upper - 1, 0)
    above, below = _MAGNITUDES[upper] - magnitude, magnitude - _MAGNITUDES[lower]
    # A code's last bit is its mantissa's, so "even" is the even code.
    take_upper = (above < below) | ((above == below) & (upper % 2 == 0))
    codes = np.where(take_upper, upper, lower).astype(np.uint8)
    return codes | (np.signbit(values).astype(np.uint8) << 7)


def e4m3_decode(codes: np.ndarray) -> np.ndarray:
    """e4m3fn codes -> float32 (NaN for the NaN codes)."""
    unsigned = codes & 0x7F
    magnitude = np.where(unsigned == 0x7F, np.nan, _MAGNITUDES[np.minimum(unsigned, 0x7E)])
    return np.where(codes & 0x80, -magnitude, magnitude).astype(np.float32)


def block_scales_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    rows, cols = shape
    return -(-rows // BLOCK), -(-cols // BLOCK)


def expand_block_scales(scales: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """One scale per element of a weight of `shape`, from its per-block scales."""
    rows, cols = shape
    return np.repeat(np.repeat(scales, BLOCK, axis=0), BLOCK, axis=1)[:rows, :cols]


def quantize_blocks(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A 2-D float32 weight -> (its e4m3fn codes, its float32 weight_scale_inv per 128x128 block)."""
    rows, cols = weight.shape
    block_rows, block_cols = block_scales_shape(weight.shape)
    padded = np.zeros((block_rows * BLOCK, block_cols * BLOCK), dtype=np.float32)
    padded[:rows, :cols] = np.abs(weight)
    largest = padded.reshape(block_rows, BLOCK, block_cols, BLOCK).max(axis=(1, 3))
    scales = (np.where(largest > 0, largest, np.float32(1.0)) / np.float32(E4M3_MAX)).astype(np.float32)
    return e4m3_encode(weight / expand_block_scales(scales, weight.shape)), scales
