#!/usr/bin/env python3
# Run: python3 bench/gpu_calls/2026-12-07_s28_persistent_sync_sim.py  (prints "bad 0" when every case completes)
# Deadlock / ordering check of the persistent sm_90 forward's synchronisation (2026-12-07_s28_persistent_fwd.patch):
# a block walks several items (query tile, head), each with its own number of visible key tiles (0 too); the K / V
# rings' use counts run on across items; Q has one slot with a full barrier (qbar, one arrival per copy) and an
# empty one (q_empty, one arrival per consumer warp after the item's last Q K^T); with two warpgroups the turns
# (named barriers) restart per item. A randomised interleaving of the producer and the consumer warpgroups (each
# warpgroup one actor: its warps behave alike), checking that every Q / K / V read finds the item and tile it wants
# and that every named barrier ends balanced. Mutations (argv "mut") must be caught.
import random
import sys

from sync_sim import MBar, interleave


def run(items, NWG, ST, pingpong, seed, mutation=None):
    rnd = random.Random(seed)
    NCW = 4 * NWG
    fk = [MBar(1) for _ in range(ST)]; ek = [MBar(NCW) for _ in range(ST)]
    fv = [MBar(1) for _ in range(ST)]; ev = [MBar(NCW) for _ in range(ST)]
    qbar, q_empty = MBar(1), MBar(NCW)
    kslot, vslot, qslot = [None] * ST, [None] * ST, [None]
    nb = {i: 0 for i in range(1, NWG + 1)}; gen = {i: 0 for i in range(1, NWG + 1)}
    def bar_arrive(i):
        nb[i] += 1
        if nb[i] == 2: nb[i] = 0; gen[i] += 1
    def producer():
        def load(full, empty, slot, u, tag):
            s = u % ST
            while not empty[s].done(((u // ST) & 1) ^ 1): yield
            slot[s] = tag; full[s].arrive()
        kv = q_loads = 0
        for it, n in enumerate(items):
            if n == 0: continue
            if q_loads > 0 and mutation != "no_q_empty_wait":
                while not q_empty.done((q_loads - 1) & 1): yield
            qslot[0] = it; qbar.arrive()
            yield from load(fk, ek, kslot, kv, (it, 0))
            q_loads += 1
            for t in range(n):
                if t + 1 < n: yield from load(fk, ek, kslot, kv + 1, (it, t + 1))
                yield from load(fv, ev, vslot, kv, (it, t))
                kv += 1
    def consumer(wg):
        def turn_wait():
            if pingpong:
                i = 1 + wg
                nb[i] += 1; g = gen[i]
                if nb[i] == 2: nb[i] = 0; gen[i] += 1
                while gen[i] == g: yield
        def turn_pass(last):
            if pingpong and not (last and wg == NWG - 1): bar_arrive(1 + (wg + 1) % NWG)
            yield
        def wait(bar, u):
            while not bar[u % ST].done((u // ST) & 1): yield
        u0 = q_items = 0
        for it, n in enumerate(items):
            if n == 0: continue
            if pingpong and wg == NWG - 1: bar_arrive(1)
            while not qbar.done(q_items & 1): yield
            q_items += 1
            yield from wait(fk, u0)
            yield from turn_wait()
            assert qslot[0] == it, ("Q", it, qslot[0])
            assert kslot[u0 % ST] == (it, 0), ("K", it, 0, kslot[u0 % ST])
            yield from turn_pass(n == 1)
            ek[u0 % ST].arrive(4); yield
            if n == 1 and mutation != "early_q_release": q_empty.arrive(4)
            if mutation == "early_q_release" and wg == 0: q_empty.arrive(4)  # before the other warpgroup's Q K^T
            for t in range(1, n):
                u = u0 + t
                yield from wait(fk, u)
                yield from turn_wait()
                assert qslot[0] == it, ("Q", it, qslot[0])
                assert kslot[u % ST] == (it, t), ("K", it, t, kslot[u % ST])
                yield from wait(fv, u - 1)
                assert vslot[(u - 1) % ST] == (it, t - 1), ("V", it, t - 1, vslot[(u - 1) % ST])
                yield from turn_pass(t == n - 1)
                ek[u % ST].arrive(4); yield
                if t == n - 1 and mutation != "early_q_release": q_empty.arrive(4)
                if mutation == "early_q_release" and wg != 0 and t == n - 1: q_empty.arrive(4)
                ev[(u - 1) % ST].arrive(4); yield
            u = u0 + n - 1
            yield from wait(fv, u)
            assert vslot[u % ST] == (it, n - 1), ("V", it, n - 1, vslot[u % ST])
            ev[u % ST].arrive(4)
            u0 += n if mutation != "ring_restarts" else 0
    actors = [producer()] + [consumer(w) for w in range(NWG)]
    try:
        if interleave(actors, rnd, 100000): return "deadlock"
    except AssertionError as e:
        return f"wrong data {e}"
    for i in nb:
        if nb[i] != 0: return f"named barrier {i} left with {nb[i]} arrivals"
    return "ok"

def cases():
    rnd = random.Random(1)
    yield [3, 1, 0, 4, 2]
    yield [1, 1, 1]
    yield [0, 0, 2]
    for _ in range(40): yield [rnd.choice([0, 1, 1, 2, 3, 5, 8]) for _ in range(rnd.randint(1, 6))]

mut = sys.argv[1:] == ["mut"]
bad = 0
for NWG, ST, pp in [(2, 2, True), (3, 3, False)]:
    for items in cases():
        for seed in range(12):
            r = run(items, NWG, ST, pp, seed)
            if r != "ok": print(NWG, ST, pp, items, seed, r); bad += 1; break
print("bad", bad)
if mut:
    for m in ["no_q_empty_wait", "early_q_release", "ring_restarts"]:
        caught = 0
        for NWG, ST, pp in [(2, 2, True), (3, 3, False)]:
            for items in cases():
                for seed in range(12):
                    if run(items, NWG, ST, pp, seed, m) != "ok": caught += 1; break
        print("mutation", m, "caught in", caught, "cases")
