"""Minimal safetensors reader and writer (json + numpy only), plus the number
formats the reference needs: bf16 and float8 e4m3fn, which numpy lacks.

File layout (https://github.com/huggingface/safetensors):
  8 bytes   little-endian u64 N, the header length
  N bytes   JSON: {name: {"dtype", "shape", "data_offsets": [begin, end]}, ...,
                   optional "__metadata__": {str: str}}
  rest      the data buffer; offsets are relative to its start

Arrays come back as numpy arrays of their stored type; bf16 and F8_E4M3
come back as raw uint16 / uint8 codes tagged with their dtype (see Tensor),
and to_f32() decodes any of them exactly.
"""
import json
import os
import struct

import numpy as np

# safetensors dtype name -> (numpy storage dtype, element size)
_STORAGE = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "F8_E4M3": np.dtype("u1"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
}


class Tensor:
    """A stored tensor: dtype is the safetensors name, data the raw numpy view."""

    def __init__(self, dtype, data):
        self.dtype = dtype
        self.data = data

    @property
    def shape(self):
        return tuple(self.data.shape)

    def to_f32(self):
        return to_f32(self.dtype, self.data)


# ------------------------------------------------------------ number formats

def bf16_bits_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """Round-to-nearest-even to bf16; returns the uint16 codes."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    if np.any(np.isnan(x)):
        raise ValueError("NaN cannot be rounded to bf16 here")
    rounded = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return rounded.astype(np.uint16)


def round_to_bf16(x):
    """f32 -> nearest bf16 value, returned as f32."""
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


def _e4m3_table():
    """Value of every float8 e4m3fn code: bias 7, subnormals, no infinities,
    S.1111.111 is NaN."""
    vals = np.zeros(256, dtype=np.float32)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exp = (code >> 3) & 0xF
        man = code & 0x7
        if exp == 0xF and man == 0x7:
            vals[code] = np.nan
        elif exp == 0:
            vals[code] = sign * (man / 8.0) * 2.0 ** -6
        else:
            vals[code] = sign * (1.0 + man / 8.0) * 2.0 ** (exp - 7)
    return vals


E4M3_VALUES = _e4m3_table()
E4M3_MAX = 448.0


def e4m3_to_f32(codes):
    return E4M3_VALUES[codes]


def f32_to_e4m3(x):
    """Round to the nearest e4m3fn value (ties to the even code), saturating at
    +-448. Returns uint8 codes."""
    x = np.asarray(x, dtype=np.float32)
    pos_codes = np.arange(0, 0x7F, dtype=np.uint8)  # 0x00..0x7e: all finite non-negative
    pos_vals = E4M3_VALUES[pos_codes]                 # increasing
    a = np.minimum(np.abs(x), E4M3_MAX)
    hi = np.clip(np.searchsorted(pos_vals, a, side="left"), 0, len(pos_vals) - 1)
    lo = np.maximum(hi - 1, 0)
    d_hi = pos_vals[hi] - a
    d_lo = a - pos_vals[lo]
    pick_lo = (d_lo < d_hi) | ((d_lo == d_hi) & (pos_codes[lo] % 2 == 0))
    code = np.where(pick_lo, pos_codes[lo], pos_codes[hi]).astype(np.uint8)
    return np.where((x < 0) & (code != 0), code | np.uint8(0x80), code).astype(np.uint8)


def to_f32(dtype, data):
    if dtype == "F32":
        return data.astype(np.float32)
    if dtype == "F16":
        return data.astype(np.float32)
    if dtype == "BF16":
        return bf16_bits_to_f32(data)
    if dtype == "F8_E4M3":
        return e4m3_to_f32(data)
    raise ValueError(f"dtype {dtype} is not a float format this reference reads")


# ------------------------------------------------------------------- reading

def read_file(path):
    """Returns {name: Tensor} for one .safetensors file, with bounds checks."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    buf = memoryview(blob)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info["dtype"]
        if dtype not in _STORAGE:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dtype}")
        st = _STORAGE[dtype]
        shape = [int(s) for s in info["shape"]]
        begin, end = info["data_offsets"]
        count = int(np.prod(shape)) if shape else 1
        if not (0 <= begin <= end <= len(buf)) or end - begin != count * st.itemsize:
            raise ValueError(f"{path}: tensor {name} has bad data_offsets {begin},{end}")
        arr = np.frombuffer(buf[begin:end], dtype=st).reshape(shape)
        out[name] = Tensor(dtype, arr)
    return out


def read_model_dir(model_dir):
    """All tensors of a HF model directory: model.safetensors, or the shards
    listed in model.safetensors.index.json, or else every *.safetensors."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    elif os.path.exists(single):
        files = ["model.safetensors"]
    else:
        files = sorted(p for p in os.listdir(model_dir) if p.endswith(".safetensors"))
    if not files:
        raise FileNotFoundError(f"no safetensors files in {model_dir}")
    tensors = {}
    for fn in files:
        for name, t in read_file(os.path.join(model_dir, fn)).items():
            if name in tensors:
                raise ValueError(f"tensor {name} appears in more than one shard")
            tensors[name] = t
    return tensors


# ------------------------------------------------------------------- writing

def write_file(path, tensors, metadata=None):
    """tensors: ordered {name: Tensor}. Data is laid out in the given order,
    contiguous, and the header is padded with spaces to a multiple of 8 bytes."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks = []
    offset = 0
    for name, t in tensors.items():
        st = _STORAGE[t.dtype]
        raw = np.ascontiguousarray(t.data, dtype=st).tobytes()
        header[name] = {"dtype": t.dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * ((8 - len(hbytes) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for c in chunks:
            f.write(c)
