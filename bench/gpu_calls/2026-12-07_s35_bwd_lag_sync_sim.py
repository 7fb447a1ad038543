#!/usr/bin/env python3
# Run: python3 bench/gpu_calls/2026-12-07_s35_bwd_lag_sync_sim.py [mut]  (prints "bad 0" when every case completes)
# Deadlock / ordering check of the sm_90 backward's synchronisation since the thirty-fifth session (attn_bwd_sm90.cuh:
# each step's dQ product issued one step late). Actors, each a warpgroup-sized unit advanced in random interleavings:
#   producer: the Q / dO stage ring, full / empty mbarriers (parity waits);
#   consumers 0 and 1: per step i wait full, [warpgroup 0 at step 0 arrives the start barrier; warpgroup 1 syncs on it
#     before its first step], wait ds_empty(i % 2) for step i - 2's dQ products (i >= 2), write their dS^T half,
#     arrive ds_full(i % 2), wait ds_full((i - 1) % 2) (i >= 1) and issue dQ of step i - 1 on it (reads both halves),
#     dK; when dQ is in: arrive ds_empty((i - 1) % 2) and store dQ of step i - 1 into tile (i - 1) % 2 (after their
#     own dQ-empty barrier with the writer for steps >= 2), arrive dQ-full; when dK is in: release the stage. After the
#     loop: dQ of the last step the same way;
#   writer: per step j, sync dQ-full(j % 2) with both consumers, reduce the tile (its read completes one step later:
#     bulk_wait_read<1>), then arrive both consumers' dQ-empty barriers of the tile read when a step j + 1 follows.
# Checks: a stage is not reloaded before both consumers are done with it; no dS^T buffer is written while a dQ
# product still reads its older step, and a dQ product reads both halves of its own step; no dQ tile is written before
# the writer read its older step, and the writer reads both halves of its own step; no named barrier gets two arrivals
# from one actor in one generation (the hardware would count them into one completion) or is left half-arrived.
# `mut` also runs three broken variants and expects each to be caught.
import random
import sys

from sync_sim import MBar, interleave


class NamedBar:
    def __init__(s, units): s.units, s.arrived, s.gen = units, set(), 0
    def arrive(s, who):
        assert who not in s.arrived, ("two arrivals in one generation", who)
        s.arrived.add(who)
        if len(s.arrived) == s.units: s.arrived = set(); s.gen += 1


def run(n, seed, mutation=None):
    rnd = random.Random(seed)
    ST, NT = 2, 2
    full = [MBar(1) for _ in range(ST)]; empty = [MBar(2) for _ in range(ST)]
    ds_full = [MBar(2) for _ in range(2)]; ds_empty = [MBar(2) for _ in range(2)]
    start = NamedBar(2)
    dq_full = [NamedBar(3) for _ in range(NT)]
    dq_empty = [[NamedBar(2) for _ in range(NT)] for _ in range(2)]  # [warpgroup][tile]
    named = [start] + dq_full + dq_empty[0] + dq_empty[1]
    stage = [None] * ST
    stage_users = [set() for _ in range(ST)]
    ds_half = [[None, None] for _ in range(2)]  # [buffer][warpgroup]: the step whose dS^T half it holds
    ds_readers = [set() for _ in range(2)]      # [buffer]: (warpgroup, step) of dQ products reading it
    tile_half = [[None, None] for _ in range(NT)]
    tile_read = [-1] * NT                       # the last step whose tile the writer has finished reading
    def sync(bar, who):
        g = bar.gen; bar.arrive(who)
        while bar.gen == g: yield
    def wait(mbar, parity):
        while not mbar.done(parity): yield
    def producer():
        for it in range(n):
            s = it % ST
            yield from wait(empty[s], ((it // ST) & 1) ^ 1)
            assert not stage_users[s], ("stage reloaded while in use", it)
            stage[s] = it; full[s].arrive(); yield
    def store_dq(wg, j):
        b = j % NT
        if j >= NT: yield from sync(dq_empty[wg][b], ("c", wg))
        assert tile_read[b] >= j - NT, ("dQ tile overwritten before the writer read it", j)
        tile_half[b][wg] = j; yield
        dq_full[b].arrive(("c", wg))
    def issue_dq(wg, j):
        b = j & 1
        if mutation != "no_ds_full_wait": yield from wait(ds_full[b], (j >> 1) & 1)
        assert ds_half[b] == [j, j], ("dQ reads a dS^T buffer not both halves of its step", j, ds_half[b])
        ds_readers[b].add((wg, j)); yield
    def dq_done(wg, j):
        ds_readers[j & 1].discard((wg, j))
    def consumer(wg):
        if n > 0 and wg == 1: yield from sync(start, ("c", 1))
        for it in range(n):
            s, buf = it % ST, it & 1
            yield from wait(full[s], (it // ST) & 1)
            assert stage[s] == it; stage_users[s].add(wg); yield  # S^T, dP^T, softmax, dV issued
            if it == 0 and wg == 0: start.arrive(("c", 0))
            if it >= 2 and mutation != "no_ds_empty_wait": yield from wait(ds_empty[buf], ((it - 2) >> 1) & 1)
            assert not ds_readers[buf], ("dS^T overwritten while a dQ product reads it", it, ds_readers[buf])
            ds_half[buf][wg] = it; yield
            ds_full[buf].arrive()
            if it > 0: yield from issue_dq(wg, it - 1)
            yield  # dK issued; the dQ product (and dV) complete
            if it > 0:
                dq_done(wg, it - 1)
                ds_empty[buf ^ 1].arrive()
                yield from store_dq(wg, it - 1)
            yield  # dK complete
            assert stage[s] == it
            stage_users[s].discard(wg); empty[s].arrive()
        if n > 0 and mutation != "no_last_dq":
            yield from issue_dq(wg, n - 1)
            dq_done(wg, n - 1)
            yield from store_dq(wg, n - 1)
    def writer():
        for it in range(n):
            b = it % NT
            yield from sync(dq_full[b], "w")
            assert tile_half[b] == [it, it], ("the writer reads a tile not both halves of its step", it)
            yield  # reductions issued; the previous step's tile has been read
            if it >= 1: tile_read[(it - 1) % NT] = it - 1
            if it >= NT - 1 and it + 1 < n:
                for wg in range(2): dq_empty[wg][(it - NT + 1) % NT].arrive("w")
            yield
        if n: tile_read[(n - 1) % NT] = n - 1
    actors = [producer(), consumer(0), consumer(1), writer()]
    try:
        if interleave(actors, rnd, 20000): return "deadlock"
    except AssertionError as e:
        return f"assert {e}"
    left = [i for i, bar in enumerate(named) if bar.arrived]
    return "ok" if not left else f"named barriers {left} half-arrived"


bad = 0
for n in range(0, 13):
    for seed in range(300):
        r = run(n, seed)
        if r != "ok": print(n, seed, r); bad += 1; break
print("bad", bad)
if len(sys.argv) > 1 and sys.argv[1] == "mut":
    for m in ("no_ds_empty_wait", "no_ds_full_wait", "no_last_dq"):
        caught = next((f"n={n} seed={seed}: {r}" for n in range(1, 10) for seed in range(60)
                       if (r := run(n, seed, m)) != "ok"), None)
        print(f"mutation {m}: {'caught, ' + caught if caught else 'NOT caught'}")
