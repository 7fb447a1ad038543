# Shared by the synchronisation models of the sm_90 attention kernels (bench/gpu_calls/*_sync_sim.py): an mbarrier
# with phase parity, and the driver that advances generator actors (each `yield` is one step of a warp or warpgroup
# that may be interleaved with the others) in a random order.


class MBar:
    def __init__(s, count): s.count, s.pending, s.phase = count, count, 0
    def arrive(s, k=1):
        for _ in range(k):
            s.pending -= 1
            assert s.pending >= 0
            if s.pending == 0: s.phase += 1; s.pending = s.count
    def done(s, parity): return (s.phase & 1) != parity  # phase `parity` (mod 2) completed


def interleave(actors, rnd, limit):
    """Runs the actors to completion in an order drawn from rnd; "deadlock" when `limit` steps pass without one
    finishing, else None. An actor's AssertionError propagates."""
    alive, stall = list(actors), 0
    while alive:
        a = rnd.choice(alive)
        try:
            next(a); stall += 1
        except StopIteration:
            alive.remove(a); stall = 0
        if stall > limit: return "deadlock"
    return None
