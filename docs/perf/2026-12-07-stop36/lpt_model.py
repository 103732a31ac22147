#!/usr/bin/env python3
"""The wave model behind the attention's CTA dealing (stop 36, `Gen::deal_ctas`).

Qwen3-14B prefill attention, causal, 40/8 heads packed 5 to a K/V head: 2048·5 packed rows
in CTAs of 128, nx = 80 row blocks per K/V head, ny = 8 heads; CTA x sees keys up to
position 25.6·(x + 1), in blocks of 64, plus half a block of fixed cost. One CTA an SM on
132 SMs; each SM takes the next CTA in launch order when it is free (greedy list
scheduling). Prints the makespan (in blocks) for the launch order before stop 36 (x
fastest, each head's light row blocks first), for reversed x within a head, and for the
order `deal_ctas` gives (every head's heaviest first), against the ideal (total / SMs).
"""
import heapq
import math


def makespan(order, sms=132):
    free = [0.0] * sms
    heapq.heapify(free)
    end = 0.0
    for w in order:
        t = heapq.heappop(free) + w
        end = max(end, t)
        heapq.heappush(free, t)
    return end


for t, nx in [(2048, 80), (4096, 160)]:
    ny = 8
    w = [math.ceil(25.6 * (x + 1) / 64) + 0.5 for x in range(nx)]
    grid = [w[x] for y in range(ny) for x in range(nx)]
    rev = [w[nx - 1 - x] for y in range(ny) for x in range(nx)]
    dealt = [w[nx - 1 - l // ny] for l in range(nx * ny)]
    before, after = makespan(grid), makespan(dealt)
    print(f"T = {t}: ideal {sum(grid) / 132:.1f}, grid order {before}, reversed x {makespan(rev)}, "
          f"dealt {after}: {100 * (1 - after / before):.1f}% shorter")
