#!/usr/bin/python3
"""tests/fuzz/compare_pil.py -- which mutated images does glimpse load that PIL refuses?

    /usr/bin/python3 tests/fuzz/compare_pil.py [--per-seed 500] [--seed 13] [--glimpse build/glimpse]

Mutates every seed image in tests/corpus/image/ (seed_*) with a fixed random seed -- bit
flips, byte overwrites, truncation, inserted and deleted runs -- writes the files to a
temporary folder, loads each with PIL (Image.open + load, truncated images refused, as
PIL does by default) and with glimpse (image.load), and prints per format how many both
load, only glimpse loads, only PIL loads, and neither.  Needs python3-pil; `make test` does
not use it.  A file only glimpse loads is worth a look: it is damaged in a way glimpse's
decoders paper over.
"""
import argparse
import os
import random
import subprocess
import sys
import shutil
import tempfile
import warnings

from PIL import Image

Image.MAX_IMAGE_PIXELS = 1 << 25          # the same cap as glimpse's default, and past it
warnings.simplefilter("error", Image.DecompressionBombWarning)   # an error, not a warning


def mutate(data, rng):
    b = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 3, 8])):
        kind = rng.randrange(5)
        if len(b) < 2:
            break
        at = rng.randrange(len(b))
        if kind == 0:
            b[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            b[at] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])
        elif kind == 2:
            del b[rng.randrange(1, len(b)):]
        elif kind == 3:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
        else:
            del b[at:at + rng.randrange(1, 16)]
    return bytes(b)


def pil_loads(path):
    try:
        with Image.open(path) as im:
            im.load()
        return True
    except Exception:                     # PIL raises many kinds; any means "refused"
        return False


GLIMPSE_SCRIPT = r"""
local glimpse = require "glimpse"
for path in io.lines(arg[1]) do
  local ok = pcall(glimpse.image.load, path)
  print(ok and "1" or "0")
end
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-seed", type=int, default=500)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--glimpse", default="build/glimpse")
    ap.add_argument("--keep", help="copy the files only one of the two loads into this folder")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    seeds = sorted(f for f in os.listdir("tests/corpus/image") if f.startswith("seed"))
    with tempfile.TemporaryDirectory() as d:
        paths, fmts = [], []
        for s in seeds:
            data = open(os.path.join("tests/corpus/image", s), "rb").read()
            fmt = s.rsplit(".", 1)[1]
            for i in range(a.per_seed):
                p = os.path.join(d, "%s-%d.%s" % (s, i, fmt))
                with open(p, "wb") as f:
                    f.write(mutate(data, rng))
                paths.append(p)
                fmts.append(fmt)
        lst = os.path.join(d, "list.txt")
        with open(lst, "w") as f:
            f.write("\n".join(paths) + "\n")
        script = os.path.join(d, "load.lua")
        with open(script, "w") as f:
            f.write(GLIMPSE_SCRIPT)
        out = subprocess.run([a.glimpse, script, lst], capture_output=True, text=True, check=True)
        gl = [line == "1" for line in out.stdout.split()]
        assert len(gl) == len(paths), out.stderr
        table = {}
        for p, fmt, g in zip(paths, fmts, gl):
            row = table.setdefault(fmt, [0, 0, 0, 0])
            pl = pil_loads(p)
            row[0 if g and pl else 1 if g else 2 if pl else 3] += 1
            if a.keep and g != pl:
                os.makedirs(a.keep, exist_ok=True)
                shutil.copy(p, os.path.join(a.keep, ("glimpse-" if g else "pil-") + os.path.basename(p)))
    print("%-5s %7s %13s %9s %8s" % ("fmt", "both", "glimpse only", "PIL only", "neither"))
    tot = [0, 0, 0, 0]
    for fmt in sorted(table):
        r = table[fmt]
        tot = [x + y for x, y in zip(tot, r)]
        print("%-5s %7d %13d %9d %8d" % (fmt, *r))
    print("%-5s %7d %13d %9d %8d" % ("all", *tot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
