#!/usr/bin/env python3
# Run: python3 bench/gpu_calls/2026-12-05_s19_fa3_bwd_sync_sim.py  (prints "bad 0" when every case completes)
# Deadlock / ordering check of the patched sm90 backward's synchronisation: the producer's Q/dO stage ring
# (mbarrier parity waits), the two consumer warpgroups' dS^T barrier (named barrier 1) over a double-buffered
# dS^T tile, and with the dQ writer warp (DQW) its two named barriers (2: the consumers' dQ is in shared memory,
# 3: the writer has read it). Randomised interleavings of warpgroup-sized actors; checks that no dS^T buffer is
# overwritten while the other warpgroup still reads it, no dQ tile is overwritten before the writer read it,
# and no named barrier is left half-arrived.
import random

from sync_sim import MBar, interleave


def run(n, ST, dqw, seed):
    rnd = random.Random(seed)
    full = [MBar(1) for _ in range(ST)]; empty = [MBar(8) for _ in range(ST)]
    units = {1: 2, 2: 3, 3: 3}  # actors per completion: barrier 1 the two warpgroups, 2 and 3 with the writer
    cnt = {i: 0 for i in units}; gen = {i: 0 for i in units}
    stage = [None] * ST
    ds_reading = [set(), set()]  # per dS^T buffer: warpgroups whose dQ product still reads it
    ds_owner = [None, None]      # step whose dS^T it holds
    dq_tile = {"step": None, "read": True}
    def arrive(i):
        cnt[i] += 1
        if cnt[i] == units[i]: cnt[i] = 0; gen[i] += 1
    def sync(i):
        g = gen[i]; arrive(i)
        while gen[i] == g: yield
    def producer():
        for it in range(n):
            s = it % ST
            while not empty[s].done(((it // ST) & 1) ^ 1): yield
            stage[s] = it; full[s].arrive(); yield
    def consumer(wg):
        for it in range(n):
            s, buf = it % ST, it & 1
            while not full[s].done((it // ST) & 1): yield
            assert stage[s] == it
            # dS^T -> buffer buf (this warpgroup's rows): nobody may still read the buffer's older step
            assert not (ds_reading[buf] - {wg}) or ds_owner[buf] == it, ("dS overwritten", it)
            ds_owner[buf] = it; yield
            yield from sync(1)
            ds_reading[buf].add(wg); yield  # the dQ product reads both warpgroups' dS^T
            ds_reading[buf].discard(wg)     # wgmma_wait<0>
            for _ in range(4): empty[s].arrive()
            if dqw:
                if it > 0: yield from sync(3)
                assert dq_tile["read"] or dq_tile["step"] == it, ("dQ overwritten", it)
                dq_tile["step"] = it; dq_tile["read"] = False; yield
                arrive(2)
            yield
    def writer():
        for it in range(n):
            yield from sync(2)
            assert dq_tile["step"] == it
            yield
            dq_tile["read"] = True
            if it + 1 < n: arrive(3)
            yield
    actors = [producer(), consumer(0), consumer(1)] + ([writer()] if dqw else [])
    if interleave(actors, rnd, 100000): return "deadlock"
    left = [i for i in cnt if cnt[i]]
    return "ok" if not left else f"named barriers {left} half-arrived"


bad = 0
for ST in (2, 3):
    for dqw in (False, True):
        for n in range(0, 9):
            for seed in range(30):
                r = run(n, ST, dqw, seed)
                if r != "ok": print(ST, dqw, n, seed, r); bad += 1; break
print("bad", bad)
