#!/usr/bin/env python3
"""A reader of an rtapi HAL segment written from hal/LAYOUT.md (2.0) alone, for the tests.

Usage: read_segment.py INSTANCE [ROUNDS]

Prints one line per live object, sorted, in a form the Rust test compares with HalReader:
  component NAME PINS PARAMS FUNCTIONS
  pin NAME TYPE DIR COMPONENT SIGNAL|- VALUE
  param NAME TYPE ACCESS COMPONENT VALUE
  signal NAME TYPE WRITER|- READERS BIDIRS VALUE
  function NAME COMPONENT THREAD|- POSITION|-
  thread NAME PERIOD FUNCTIONS
With ROUNDS > 1 it reads the structure that many times (each read inside the generation protocol,
checking the cross-record rules) and prints only the last one and a line "rounds N retries R".
Exit status 2 and "refused: ..." on stderr for anything it must refuse.

Python cannot issue atomic loads; on x86-64 an aligned 1-, 4- or 8-byte memoryview read is a single
load, which is what this test relies on (LAYOUT.md section 2 asks real readers for atomics).
"""
import mmap
import os
import stat
import struct
import sys
import time

TYPES = {1: "bit", 2: "float", 3: "s32", 4: "u32", 5: "s64", 6: "u64"}
DIRS = {1: "IN", 2: "OUT", 3: "IO"}
ACCESS = {1: "RO", 2: "RW"}
# Table order and the record sizes this reader knows (section 5).
TABLES = ["component", "pin", "param", "signal", "function", "thread"]
KNOWN = {"component": 64, "pin": 88, "param": 80, "signal": 88, "function": 128, "thread": 136}
FLAGS = {"component": 60, "pin": 80, "param": 72, "signal": 80, "function": 68}


class Refused(Exception):
    pass


def u32(m, off):
    return struct.unpack_from("=I", m, off)[0]


def u64(m, off):
    return struct.unpack_from("=Q", m, off)[0]


def name(m, off, size=48):
    raw = bytes(m[off:off + size])
    if 0 not in raw:
        raise Refused("name field without NUL")
    n = raw.index(0)
    if n == 0 or any(raw[n:]):
        raise Refused("bad name field")
    text = raw[:n].decode("ascii", "strict")
    if any(not (c.isalnum() or c in "._-:") for c in text):
        raise Refused("bad characters in a name")
    return text


def cell(m, off, ty):
    """Section 3: only the type's bytes, from the slot start."""
    if ty == 1:
        return "TRUE" if m[off] != 0 else "FALSE"
    if ty == 3:
        return str(struct.unpack_from("=i", m, off)[0])
    if ty == 4:
        return str(struct.unpack_from("=I", m, off)[0])
    if ty == 2:
        return repr(struct.unpack_from("=d", m, off)[0])
    if ty == 5:
        return str(struct.unpack_from("=q", m, off)[0])
    return str(struct.unpack_from("=Q", m, off)[0])


def open_segment(instance):
    path = "/dev/shm/rtapi-" + instance
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise Refused("not a regular file")
    if st.st_uid not in (0, os.geteuid()):
        raise Refused("untrusted owner")
    if st.st_mode & 0o7777 & ~0o640:
        raise Refused("mode beyond 0640")
    if st.st_size < 256:
        raise Refused("not an rtapi segment")
    m = mmap.mmap(fd, st.st_size - st.st_size % 8, mmap.MAP_SHARED, mmap.PROT_READ)
    return memoryview(m)


def header(m):
    """Section 4, steps 1-10: the fixed part, validated once."""
    if bytes(m[0:8]) == b"\0" * 8:
        raise Refused("being built (all-zero magic)")
    if bytes(m[0:8]) != b"RTAPIHAL":
        raise Refused("foreign file")
    if u64(m, 24) != 0x0102030405060708:
        raise Refused("byte order")
    version = u32(m, 8)
    if version >> 16 != 2:
        raise Refused("unsupported version %d.%d" % (version >> 16, version & 0xFFFF))
    if u64(m, 40) not in (2, 3, 4):
        raise Refused("not ready")
    header_size = u32(m, 12)
    total = u64(m, 16)
    if header_size < 256 or header_size % 8 or header_size > len(m):
        raise Refused("header size")
    if total < header_size or total % 8 or total > len(m):
        raise Refused("truncated")
    name(m, 56)
    tables = {}
    for i, t in enumerate(TABLES):
        d = 104 + 16 * i
        off, stride, cap = u64(m, d), u32(m, d + 12), u32(m, 200 + 4 * i)
        if stride < KNOWN[t] or stride % 8 or off % 8 or off < header_size:
            raise Refused("the %s table descriptor" % t)
        if off + cap * stride > total:
            raise Refused("the %s table runs past the end" % t)
        tables[t] = (off, stride, cap)
    ext = sorted((o, o + c * s, t) for t, (o, s, c) in tables.items() if c)
    for a, b in zip(ext, ext[1:]):
        if a[1] > b[0]:
            raise Refused("the %s table and the %s table overlap" % (a[2], b[2]))
    return tables


def read_structure(m, tables):
    """One read of the whole structure, validated; the caller checks the generation around it."""
    counts = {}
    for i, t in enumerate(TABLES):
        n = u32(m, 104 + 16 * i + 8)
        if n > tables[t][2]:
            raise Refused("the %s table says %d records are in use" % (t, n))
        counts[t] = n

    def rec(t, i):
        return tables[t][0] + i * tables[t][1]

    def deleted(t, i):
        if t not in FLAGS:
            return False
        fl = u32(m, rec(t, i) + FLAGS[t])
        if fl not in (0, 1):
            raise Refused("unknown flags")
        return fl == 1

    def resolve(t, ref):
        if ref == 0:
            return None
        off, stride, _ = tables[t]
        rel = ref - off
        if rel < 0 or rel % stride or rel // stride >= counts[t] or deleted(t, rel // stride):
            raise Refused("a reference that is not a live %s record" % t)
        return rel // stride

    def names(t):
        return {i: name(m, rec(t, i)) for i in range(counts[t]) if not deleted(t, i)}

    n = {t: names(t) for t in TABLES}
    out = []
    for i, nm in n["component"].items():
        r = rec("component", i)
        out.append(("component", nm, u32(m, r + 48), u32(m, r + 52), u32(m, r + 56)))
    links = {}
    for i, nm in n["pin"].items():
        r = rec("pin", i)
        ty, d = u32(m, r + 48), u32(m, r + 52)
        if ty not in TYPES or d not in DIRS:
            raise Refused("pin type or direction")
        comp = resolve("component", u64(m, r + 56))
        sig = resolve("signal", u64(m, r + 64))
        if sig is not None:
            if u32(m, rec("signal", sig) + 48) != ty:
                raise Refused("pin linked to a signal of another type")
            links.setdefault(sig, [0, 0, 0])[[2, 1, 3].index(d)] += 1
            value = cell(m, rec("signal", sig) + 72, ty)
        else:
            value = cell(m, r + 72, ty)
        out.append(("pin", nm, TYPES[ty], DIRS[d], n["component"][comp],
                    n["signal"][sig] if sig is not None else "-", value))
    for i, nm in n["param"].items():
        r = rec("param", i)
        ty = u32(m, r + 48)
        comp = resolve("component", u64(m, r + 56))
        out.append(("param", nm, TYPES[ty], ACCESS[u32(m, r + 52)], n["component"][comp],
                    cell(m, r + 64, ty)))
    for i, nm in n["signal"].items():
        r = rec("signal", i)
        ty = u32(m, r + 48)
        writers, readers, bidirs = u32(m, r + 52), u32(m, r + 56), u32(m, r + 60)
        w = resolve("pin", u64(m, r + 64))
        if w is not None and (u32(m, rec("pin", w) + 52) != 2
                              or resolve("signal", u64(m, rec("pin", w) + 64)) != i):
            raise Refused("writer_pin is not an OUT pin of the signal")
        if [writers, readers, bidirs] != links.get(i, [0, 0, 0]) or writers != (w is not None):
            raise Refused("signal counts disagree with its pins")
        out.append(("signal", nm, TYPES[ty], n["pin"][w] if w is not None else "-",
                    readers, bidirs, cell(m, r + 72, ty)))
    positions = {}
    for i, nm in n["function"].items():
        r = rec("function", i)
        comp = resolve("component", u64(m, r + 48))
        t = resolve("thread", u64(m, r + 56))
        pos = u32(m, r + 64)
        if t is not None:
            positions.setdefault(t, []).append(pos)
        out.append(("function", nm, n["component"][comp],
                    n["thread"][t] if t is not None else "-", pos if t is not None else "-"))
    for i, nm in n["thread"].items():
        r = rec("thread", i)
        listed = u32(m, r + 128)
        if sorted(positions.get(i, [])) != list(range(listed)):
            raise Refused("thread run list positions")
        out.append(("thread", nm, u64(m, r + 48), listed))
    return out


def consistent(m, tables):
    """Section 7a: wait out an odd generation, read, keep the result (or the refusal) only if the
    generation did not move meanwhile."""
    start, odd_since, retries = time.monotonic(), None, 0
    while True:
        g1 = u64(m, 224)
        if g1 % 2:
            odd_since = odd_since or time.monotonic()
            if time.monotonic() - odd_since > 1.0:
                raise Refused("structure being changed for too long (owner died mid-change?)")
            time.sleep(0.00005)
            continue
        odd_since = None
        out, err = None, None
        try:
            out = read_structure(m, tables)
        except (Refused, KeyError, IndexError, ValueError, struct.error) as e:
            err = e
        if u64(m, 224) == g1:
            if err is not None:
                raise Refused(str(err))
            return out, retries
        retries += 1
        if time.monotonic() - start > 2.0:
            raise Refused("structure changing continuously")


def main():
    instance = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    try:
        m = open_segment(instance)
        tables = header(m)
        total_retries = 0
        for _ in range(rounds):
            out, retries = consistent(m, tables)
            total_retries += retries
    except Refused as e:
        print("refused: %s" % e, file=sys.stderr)
        sys.exit(2)
    for line in sorted(" ".join(str(x) for x in row) for row in out):
        print(line)
    if rounds > 1:
        print("rounds %d retries %d" % (rounds, total_retries))


if __name__ == "__main__":
    main()
