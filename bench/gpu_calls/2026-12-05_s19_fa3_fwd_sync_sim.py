#!/usr/bin/env python3
# Run: python3 bench/gpu_calls/2026-12-05_s19_fa3_fwd_sync_sim.py  (prints "bad 0" when every case completes)
# Deadlock / ordering check of the patched sm90 forward's synchronisation (mbarrier rings, ping-pong named
# barriers; `overlap` False: the loop order of the 256-key D = 64 build), as a randomised interleaving of the producer and the consumer warpgroups (each warpgroup one actor:
# its warps behave alike). Also checks that a consumer never reads a slot that holds another tile.
import random
import sys

from sync_sim import MBar, interleave


class NBar:  # named barrier counting warpgroups (128 threads each); 2 per completion
    def __init__(s): s.arrived, s.waiting = 0, []
def run(n, NWG, ST, pingpong, seed, overlap=True):
    rnd = random.Random(seed)
    NCW = 4 * NWG
    fk = [MBar(1) for _ in range(ST)]; ek = [MBar(NCW) for _ in range(ST)]
    fv = [MBar(1) for _ in range(ST)]; ev = [MBar(NCW) for _ in range(ST)]
    kslot = [None] * ST; vslot = [None] * ST
    nb = {i: [0, 0] for i in range(1, NWG + 1)}  # [arrived units, released generation]
    gen = {i: 0 for i in range(1, NWG + 1)}
    def bar_arrive(i):
        nb[i][0] += 1
        if nb[i][0] == 2: nb[i][0] = 0; gen[i] += 1
    def producer():
        def load_k(it, j):
            s = it % ST
            while not ek[s].done(((it // ST) & 1) ^ 1): yield
            kslot[s] = j; fk[s].arrive()
        def load_v(it, j):
            s = it % ST
            while not ev[s].done(((it // ST) & 1) ^ 1): yield
            vslot[s] = j; fv[s].arrive()
        if n > 0: yield from load_k(0, 0)
        for it in range(n):
            if it + 1 < n: yield from load_k(it + 1, it + 1)
            yield from load_v(it, it)
    def consumer(wg):
        def turn_wait():
            if pingpong:
                i = 1 + wg
                # bar.sync: counts itself, waits for the completion
                nb[i][0] += 1; g = gen[i]
                if nb[i][0] == 2: nb[i][0] = 0; gen[i] += 1
                while gen[i] == g: yield
        def turn_pass(last):
            if pingpong and not (last and wg == NWG - 1): bar_arrive(1 + (wg + 1) % NWG)
            yield
        def arrive_all(bar):  # its 4 warps
            for _ in range(4): bar.arrive()
        if n == 0: return
        if pingpong and wg == NWG - 1: bar_arrive(1)
        while not fk[0].done(0): yield
        yield from turn_wait()
        assert kslot[0] == 0
        yield from turn_pass(n == 1)
        arrive_all(ek[0]); yield
        for it in range(1, n):
            s, sp = it % ST, (it - 1) % ST
            if not overlap:  # 256-key tiles (twenty-seventh session): P V, its wait, then S, all in the turn
                while not fv[sp].done(((it - 1) // ST) & 1): yield
                while not fk[s].done((it // ST) & 1): yield
                yield from turn_wait()
                assert vslot[sp] == it - 1, ("V", it - 1, vslot[sp])
                arrive_all(ev[sp]); yield
                assert kslot[s] == it, ("K", it, kslot[s])
                yield from turn_pass(it == n - 1)
                arrive_all(ek[s]); yield
                continue
            while not fk[s].done((it // ST) & 1): yield
            yield from turn_wait()
            assert kslot[s] == it, ("K", it, kslot[s])
            while not fv[sp].done(((it - 1) // ST) & 1): yield
            assert vslot[sp] == it - 1, ("V", it - 1, vslot[sp])
            yield from turn_pass(it == n - 1)
            arrive_all(ek[s]); yield
            arrive_all(ev[sp]); yield
        sp = (n - 1) % ST
        while not fv[sp].done(((n - 1) // ST) & 1): yield
        assert vslot[sp] == n - 1
        arrive_all(ev[sp])
    actors = [producer()] + [consumer(w) for w in range(NWG)]
    if interleave(actors, rnd, 200000): return "deadlock"
    for i in nb:
        if nb[i][0] != 0: return f"named barrier {i} left with {nb[i][0]} arrivals"
    return "ok"

bad = 0
for NWG, ST, pp, ov in [(2, 2, True, True), (3, 3, False, True), (2, 3, True, True), (3, 3, True, True),
                       (2, 3, True, False), (2, 2, True, False)]:
    for n in range(0, 9):
        for seed in range(30):
            r = run(n, NWG, ST, pp, seed, ov)
            if r != "ok": print(NWG, ST, pp, ov, n, seed, r); bad += 1; break
print("bad", bad)
