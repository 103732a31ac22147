"""bf16 and safetensors in numpy alone, for the scripts that must run without torch.

numpy has no bfloat16, so a bf16 tensor is carried as its raw bits, a ``uint16`` array, and
labelled ``BF16`` in the file. Used by ``scripts/make_checkpoint.py`` (writes checkpoints) and
``tests/gpu/hf_layer.py compare`` (reads tessel's and Hugging Face's outputs).

The file format (the safetensors README, github.com/huggingface/safetensors, "Format"):

    8 bytes   N, the header size, unsigned little-endian
    N bytes   a UTF-8 JSON object {name: {"dtype": D, "shape": [...], "data_offsets": [b, e]},
              ..., "__metadata__": {str: str}} (the metadata entry is optional); trailing
              spaces allowed. The reference writer pads N to a multiple of 8 so every tensor
              stays 8-byte aligned; so does ``write``.
    rest      the tensors' bytes, little-endian, row-major; [b, e) is relative to the first
              byte after the header. The reference reader rejects holes and overlaps: the
              ranges, sorted, must tile the data exactly.
"""

import json
import struct

import numpy as np

# safetensors dtype name -> numpy dtype of the stored bits (BF16 as raw uint16).
DTYPES = {
    "BF16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I8": np.dtype("i1"),
    "I16": np.dtype("<i2"),
    "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"),
    "U8": np.dtype("u1"),
    "U16": np.dtype("<u2"),
    "U32": np.dtype("<u4"),
    "U64": np.dtype("<u8"),
    "BOOL": np.dtype("?"),
}

# ----------------------------------------------------------------------------------------
# bf16


def f32_to_bf16(x):
    """Rounds float32 values to bf16, round-to-nearest-even; returns the bits as uint16.

    x: any array convertible to float32 (float64 input is first rounded to float32, so this is
    the double rounding f64 -> f32 -> bf16, as torch's ``.float().bfloat16()`` does).
    Overflow goes to +-inf as IEEE rounding says (values at or past the midpoint between the
    largest finite bf16, 0x7F7F = 3.3895e38, and 2^128 round to inf); subnormals are kept,
    never flushed; a NaN becomes the quiet NaN 0x7FC0 with the input's sign (the payload is
    not kept, as in torch's c10::BFloat16 conversion).

    The rounding: add 0x7FFF plus the lowest kept bit, then truncate. A discarded half
    below 0x8000 never carries; one above always does; exactly 0x8000 carries only when the
    kept part is odd (ties to even). The carry into the exponent is the correct result at
    every binade edge, including the step to inf.
    """
    x = np.asarray(x, dtype=np.float32)
    bits = np.ascontiguousarray(x).view(np.uint32).reshape(x.shape)
    lsb = (bits >> np.uint32(16)) & np.uint32(1)
    rounded = ((bits + np.uint32(0x7FFF) + lsb) >> np.uint32(16)).astype(np.uint16)
    is_nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    quiet = ((bits >> np.uint32(16)) & np.uint32(0x8000)).astype(np.uint16) | np.uint16(0x7FC0)
    return np.where(is_nan, quiet, rounded)


def bf16_to_f32(bits):
    """bf16 bits (uint16) -> float32, exact (every bf16 value is a float32 value)."""
    b = np.asarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32).reshape(b.shape)


# ----------------------------------------------------------------------------------------
# writing


def _header(entries, metadata):
    """JSON header bytes, space-padded to a multiple of 8, and the data size in bytes.

    entries: [(name, dtype, shape, nbytes)] in file order."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, dtype, shape, nbytes in entries:
        if name in header:
            raise ValueError(f"tensor {name!r} given twice")
        if dtype not in DTYPES:
            raise ValueError(f"tensor {name!r}: unknown dtype {dtype!r}")
        want = int(np.prod(shape, dtype=np.int64)) * DTYPES[dtype].itemsize
        if want != nbytes:
            raise ValueError(f"tensor {name!r}: {dtype}{list(shape)} needs {want} bytes, got {nbytes}")
        header[name] = {"dtype": dtype, "shape": [int(d) for d in shape],
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return raw, offset


def write(path, tensors, metadata=None):
    """Writes a safetensors file.

    tensors: [(name, dtype, array)] in file order, or a dict name -> (dtype, array); dtype is a
    safetensors name ("BF16", "I32", ...), array a numpy array whose bytes are written as
    they are (for BF16, the uint16 bits from ``f32_to_bf16``). An array may instead be a
    callable returning the array, called only when its turn to be written comes, so a large
    checkpoint never has to be in memory all at once; it must then be given as
    (name, dtype, shape, callable).
    metadata: optional {str: str}, stored as "__metadata__".
    Returns the number of tensor-data bytes written.
    """
    if isinstance(tensors, dict):
        tensors = [(n, d, a) for n, (d, a) in tensors.items()]
    entries, makers = [], []
    for t in tensors:
        if len(t) == 4:
            name, dtype, shape, make = t
        else:
            name, dtype, arr = t
            shape, make = arr.shape, (lambda a=arr: a)
        nbytes = int(np.prod(shape, dtype=np.int64)) * DTYPES[dtype].itemsize
        entries.append((name, dtype, tuple(shape), nbytes))
        makers.append(make)
    raw, total = _header(entries, metadata)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for (name, dtype, shape, nbytes), make in zip(entries, makers):
            # np.require keeps a 0-d array 0-d (ascontiguousarray makes it (1,)).
            arr = np.require(make(), requirements="C")
            if tuple(arr.shape) != shape:
                raise ValueError(f"tensor {name!r}: made shape {arr.shape}, announced {shape}")
            if arr.dtype.itemsize != DTYPES[dtype].itemsize or arr.dtype.kind != DTYPES[dtype].kind:
                raise ValueError(f"tensor {name!r}: array dtype {arr.dtype} does not carry {dtype}")
            arr.astype(DTYPES[dtype], copy=False).tofile(f)
    return total


# ----------------------------------------------------------------------------------------
# reading


def read_header(path):
    """(header dict without "__metadata__", metadata dict, byte offset of the data section).

    Checks what the reference reader checks: the header fits the file, every tensor's byte
    range matches its dtype and shape, and the ranges tile the data section with no hole or
    overlap. Raises ValueError naming the first problem."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{path}: shorter than 8 bytes")
        (n,) = struct.unpack("<Q", head)
        f.seek(0, 2)
        size = f.tell()
        if 8 + n > size:
            raise ValueError(f"{path}: header of {n} bytes does not fit a {size}-byte file")
        f.seek(8)
        header = json.loads(f.read(n).decode("utf-8"))
    metadata = header.pop("__metadata__", None) or {}
    spans = []
    for name, e in header.items():
        if e["dtype"] not in DTYPES:
            raise ValueError(f"{path}: tensor {name!r} has unknown dtype {e['dtype']!r}")
        b, end = e["data_offsets"]
        want = int(np.prod(e["shape"], dtype=np.int64)) * DTYPES[e["dtype"]].itemsize
        if end - b != want:
            raise ValueError(f"{path}: tensor {name!r} is {e['dtype']}{e['shape']} ({want} bytes) "
                             f"but spans [{b}, {end})")
        spans.append((b, end, name))
    at = 0
    for b, end, name in sorted(spans):
        if b != at:
            raise ValueError(f"{path}: tensor {name!r} starts at {b}, expected {at} (hole or overlap)")
        at = end
    if 8 + n + at != size:
        raise ValueError(f"{path}: the tensors end at byte {8 + n + at}, the file at {size}")
    return header, metadata, 8 + n


def read(path, names=None):
    """Reads tensors: dict name -> (dtype, array), BF16 as uint16 bits.

    names: the tensors to read (all when None); a missing name is a KeyError that lists what
    the file has. Each tensor is read on its own (np.fromfile at its offset), so reading a
    few names of a large file costs only their bytes."""
    header, _, base = read_header(path)
    if names is None:
        names = list(header)
    out = {}
    with open(path, "rb") as f:
        for name in names:
            if name not in header:
                raise KeyError(f"{path} has no tensor {name!r}; it has {sorted(header)}")
            e = header[name]
            dt = DTYPES[e["dtype"]]
            count = int(np.prod(e["shape"], dtype=np.int64))
            f.seek(base + e["data_offsets"][0])
            arr = np.fromfile(f, dtype=dt, count=count).reshape(e["shape"])
            out[name] = (e["dtype"], arr)
    return out
