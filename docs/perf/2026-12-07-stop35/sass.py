#!/usr/bin/env python3
"""Static SASS counts for a kernel's loops (stop 35: the prefill attention's key loop).

Usage:
  sass.py FILE.sass KERNEL loops [MIN]      # each backward branch's loop: size, opcode histogram
  sass.py FILE.sass KERNEL branches LO HI   # branches and barriers between two addresses (hex)
  sass.py FILE.sass KERNEL count LO HI ...  # instructions in address ranges LO-HI (hex), summed

FILE.sass is `cuobjdump -sass` of the cubin ptxas writes for `tessel build --emit ptx`; the
tools come from PyPI (nvidia-cuda-cuobjdump==13.2.78, nvidia-cuda-nvdisasm==13.2.78; put
nvdisasm on PATH). A path through a loop is summed from its straight-line ranges, read off
`branches`.
"""
import collections
import re
import signal
import sys

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`


def instructions(path, kernel):
    body = open(path).read().split(f"Function : {kernel}\n")[1].split("Function :")[0]
    out = []
    for line in body.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            out.append((int(m.group(1), 16), m.group(2).strip()))
    return out


def opcode(s):
    return re.sub(r"^@!?U?P\w+\s+", "", s).split()[0]


def histogram(ins):
    h = collections.Counter(opcode(s) for _, s in ins)
    return ", ".join(f"{k} {v}" for k, v in h.most_common(40))


def main():
    path, kernel, mode, *rest = sys.argv[1:]
    ins = instructions(path, kernel)
    at = {a: i for i, (a, _) in enumerate(ins)}
    if mode == "loops":
        least = int(rest[0]) if rest else 50
        for i, (a, s) in enumerate(ins):
            m = re.search(r"BRA.*?0x([0-9a-f]+)", s)
            if m and int(m.group(1), 16) <= a and int(m.group(1), 16) in at:
                body = ins[at[int(m.group(1), 16)] : i + 1]
                if len(body) >= least:
                    print(f"loop {body[0][0]:#x}..{a:#x}: {len(body)} instructions")
                    print("   ", histogram(body))
    elif mode == "branches":
        lo, hi = (int(x, 16) for x in rest)
        for a, s in ins:
            if lo <= a <= hi and ("BRA" in s or "EXIT" in s or "BAR" in s):
                print(f"{a:#x} {s}")
    elif mode == "count":
        total = []
        for r in rest:
            lo, hi = (int(x, 16) for x in r.split("-"))
            part = [(a, s) for a, s in ins if lo <= a <= hi]
            print(f"{r}: {len(part)}  {histogram(part)}")
            total += part
        print(f"total {len(total)}")


main()
