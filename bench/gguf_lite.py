#!/usr/bin/env python3
"""gguf_lite.py: the tensor table of a GGUF file or a VeloxQuant reservoir file (docs/reservoir-format.md:
a 4096-byte header page, then a GGUF v3 body), standard library only. It reads what
bench/report_weights.py and tools/reference/kquant_equal_bits.py need: each tensor's name, type id
(ggml's, or VeloxQuant's own above 0xffff, which gguf-py's reader refuses), shape and the
absolute file range of its bytes, so that tensors of two files can be compared byte for byte.

  python3 bench/gguf_lite.py FILE [OTHER]   # the table; with OTHER: which tensors differ in bytes
"""
import mmap
import struct
import sys

RESERVOIR_MAGIC = b"VQRESRV\n"
# (element count per block, bytes per block) of the types these scripts meet
LAYOUT = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
          20: (32, 18), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
          23: (256, 136), 0x10004: (64, 36), 0x10003: (64, 28), 0x10002: (64, 20)}
TYPE_NAME = {0: "F32", 1: "F16", 30: "BF16", 8: "Q8_0", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 20: "IQ4_NL",
             10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 23: "IQ4_XS",
             0x10004: "tqw4", 0x10003: "tqw3", 0x10002: "tqw2"}
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class Tensor:
    __slots__ = ("name", "type", "shape", "start", "nbytes")

    def __init__(self, name, ttype, shape, start, nbytes):
        self.name, self.type, self.shape, self.start, self.nbytes = name, ttype, shape, start, nbytes

    @property
    def type_name(self):
        return TYPE_NAME.get(self.type, str(self.type))

    @property
    def bpw(self):
        n = 1
        for d in self.shape:
            n *= d
        return 8.0 * self.nbytes / n if n else 0.0


class File:
    """GGUF or reservoir file: .tensors (in file order), .by_name, .meta (scalars and strings only),
    .data(t) the tensor's bytes (a memoryview into the mapping), .size."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self._m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.size = len(self._m)
        m = self._m
        base = 0
        if m[:8] == RESERVOIR_MAGIC:
            base = struct.unpack_from("<Q", m, 24)[0]      # body_off
            self.reservoir = True
        else:
            self.reservoir = False
        if m[base:base + 4] != b"GGUF":
            raise ValueError(f"{path}: neither a GGUF nor a reservoir file")
        version, nt, nkv = struct.unpack_from("<IQQ", m, base + 4)
        if version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {version}")
        p = base + 24
        self.meta = {}

        def rstr(p):
            n = struct.unpack_from("<Q", m, p)[0]
            return bytes(m[p + 8:p + 8 + n]).decode("utf-8", "replace"), p + 8 + n

        def rval(t, p):
            if t in _SCALAR:
                fmt = _SCALAR[t]
                return struct.unpack_from(fmt, m, p)[0], p + struct.calcsize(fmt)
            if t == 8:
                return rstr(p)
            if t == 9:
                at, n = struct.unpack_from("<IQ", m, p)
                p += 12
                if at in _SCALAR:   # skipped, not decoded: only the length matters here
                    return None, p + n * struct.calcsize(_SCALAR[at])
                for _ in range(n):
                    _, p = rval(at, p)
                return None, p
            raise ValueError(f"{path}: metadata value type {t} unknown")

        for _ in range(nkv):
            k, p = rstr(p)
            t = struct.unpack_from("<I", m, p)[0]
            v, p = rval(t, p + 4)
            if v is not None:
                self.meta[k] = v
        infos = []
        for _ in range(nt):
            name, p = rstr(p)
            nd = struct.unpack_from("<I", m, p)[0]
            shape = list(struct.unpack_from(f"<{nd}Q", m, p + 4))
            ttype, off = struct.unpack_from("<IQ", m, p + 4 + 8 * nd)
            p += 4 + 8 * nd + 12
            infos.append((name, ttype, shape, off))
        align = int(self.meta.get("general.alignment", 32))
        data0 = base + ((p - base + align - 1) // align) * align
        self.tensors = []
        for name, ttype, shape, off in infos:
            if ttype not in LAYOUT:
                raise ValueError(f"{path}: tensor {name}: type {ttype} not in gguf_lite's table")
            blk, bb = LAYOUT[ttype]
            n = 1
            for d in shape:
                n *= d
            self.tensors.append(Tensor(name, ttype, shape, data0 + off, n // blk * bb))
        self.by_name = {t.name: t for t in self.tensors}

    def data(self, t):
        return memoryview(self._m)[t.start:t.start + t.nbytes]

    def close(self):
        self._m.close()


def differing(a, b):
    """Names of the tensors whose type, shape or bytes differ between File a and File b (and those in
    only one of them)."""
    out = []
    for t in a.tensors:
        u = b.by_name.get(t.name)
        if u is None or u.type != t.type or u.shape != t.shape or a.data(t) != b.data(u):
            out.append(t.name)
    out += [t.name for t in b.tensors if t.name not in a.by_name]
    return out


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    f = File(sys.argv[1])
    if len(sys.argv) == 2:
        for t in f.tensors:
            print(f"{t.name:36s} {t.type_name:6s} {'x'.join(map(str, t.shape)):>12s} {t.nbytes:10d} {t.bpw:7.4f}")
    else:
        d = differing(f, File(sys.argv[2]))
        print(f"{len(d)} tensors differ" + (": " + " ".join(d) if d else ""))
