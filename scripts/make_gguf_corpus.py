#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the small seed corpus of the GGUF fuzz target (fuzz/corpus/gguf/).

Seeds are tiny hand-built GGUF files covering every metadata value type, nested arrays, custom
alignment and a few tensor types, so the fuzzer starts from valid structure. Run once; the output
is committed.
"""
import os, struct, sys

out = sys.argv[1] if len(sys.argv) > 1 else "fuzz/corpus/gguf"
os.makedirs(out, exist_ok=True)

def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b

def kv(key, vt, payload):
    return s(key) + struct.pack("<I", vt) + payload

def header(version, n_t, kvs):
    return b"GGUF" + struct.pack("<IQQ", version, n_t, len(kvs)) + b"".join(kvs)

def tensor_info(name, dims, ttype, off):
    return s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", ttype, off)

def pad(b, a=32):
    return b + b"\0" * ((a - len(b) % a) % a)

seeds = {}
seeds["empty.gguf"] = header(3, 0, [])
seeds["v2_empty.gguf"] = header(2, 0, [])
scalars = [
    kv("u8", 0, struct.pack("<B", 7)), kv("i8", 1, struct.pack("<b", -7)),
    kv("u16", 2, struct.pack("<H", 700)), kv("i16", 3, struct.pack("<h", -700)),
    kv("u32", 4, struct.pack("<I", 70000)), kv("i32", 5, struct.pack("<i", -70000)),
    kv("f32", 6, struct.pack("<f", 1.5)), kv("bool", 7, b"\1"),
    kv("str", 8, s("hello")), kv("u64", 10, struct.pack("<Q", 1 << 40)),
    kv("i64", 11, struct.pack("<q", -(1 << 40))), kv("f64", 12, struct.pack("<d", 2.5)),
    kv("arr.i32", 9, struct.pack("<IQ", 5, 3) + struct.pack("<3i", 1, 2, 3)),
    kv("arr.str", 9, struct.pack("<IQ", 8, 2) + s("a") + s("bc")),
    kv("arr.nest", 9, struct.pack("<IQ", 9, 2) + struct.pack("<IQ", 8, 1) + s("x") +
       struct.pack("<IQ", 4, 2) + struct.pack("<2I", 1, 2)),
]
seeds["all_types.gguf"] = header(3, 0, scalars)
# tensors: f32 [4,2], f16 [8], q8_0 [32], q4_0 [32,2]
infos = [tensor_info("a", [4, 2], 0, 0), tensor_info("b", [8], 1, 32),
         tensor_info("c", [32], 8, 64), tensor_info("d", [32, 2], 2, 128)]
h = header(3, len(infos), [kv("general.architecture", 8, s("llama"))]) + b"".join(infos)
data = pad(struct.pack("<8f", *range(8))) + pad(b"\0\x3c" * 8) + pad(b"\0\x3c" + bytes(range(32))) + \
    pad((b"\0\x3c" + bytes(range(16))) * 2)
seeds["tensors.gguf"] = pad(h) + data
h = header(3, 1, [kv("general.alignment", 4, struct.pack("<I", 64))]) + tensor_info("a", [4], 0, 0)
seeds["align64.gguf"] = pad(h, 64) + struct.pack("<4f", 1, 2, 3, 4)
for name, b in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(b)
print(f"wrote {len(seeds)} seeds to {out}")
