# Fortieth session: checks the stale-maximum patch's rare path (2026-12-07_s40_stale_max2.patch, recompute_s in
# attn_fwd_sm90.cuh) on the CPU: its ldmatrix row addresses in the 128-byte swizzle and the mma.m16n8k16 fragments give
# Q K^T in the wgmma accumulator layout (register 4n + 2hr + e = row row0 + 8hr, key 8n + 2t + e). Prints "bad 0".
#   python3 bench/gpu_calls/2026-12-07_s40_recompute_sim.py
# Simulates recompute_s's ldmatrix addressing (128-byte swizzle) and mma.m16n8k16 fragments against Q K^T.
import numpy as np
rng = np.random.default_rng(1)
for D, NWG in ((64, 3), (128, 2)):
    BM, BN = 64 * NWG, 128
    Q = rng.integers(-8, 8, size=(BM, D)).astype(np.float64)
    K = rng.integers(-8, 8, size=(BN, D)).astype(np.float64)
    # shared memory as a dict: byte address -> 8 elements (16-byte chunk)
    def store(tile, rows, base):
        mem = {}
        for r in range(rows):
            for c in range(D // 8):
                half, chunk = c // 8, c % 8
                addr = base + half * rows * 128 + r * 128 + ((chunk ^ (r & 7)) << 4)
                mem[addr] = tile[r, 8 * c: 8 * c + 8]
        return mem
    sQ, sK = 0, 1 << 20
    mem = store(Q, BM, sQ); mem.update(store(K, BN, sK))
    def ldsm_x4(addrs):  # addrs[l] for lane l -> r[lane][i] = (2 elements)
        out = [[None] * 4 for _ in range(32)]
        for i in range(4):
            rows = [mem[addrs[8 * i + j]] for j in range(8)]
            for l in range(32):
                out[l][i] = rows[l // 4][2 * (l % 4): 2 * (l % 4) + 2]
        return out
    bad = 0
    for wg in range(NWG):
        for w in range(4):
            sc = np.zeros((32, BN // 2))
            for kk in range(D // 16):
                half, chunk0 = kk >> 2, (kk & 3) << 1
                qaddr = []
                for lane in range(32):
                    qr = wg * 64 + w * 16 + (lane & 15); qc = lane >> 4
                    qaddr.append(sQ + half * BM * 128 + qr * 128 + (((chunk0 + qc) ^ (qr & 7)) << 4))
                a = ldsm_x4(qaddr)
                for np_ in range(BN // 16):
                    kaddr = []
                    for lane in range(32):
                        kr = 16 * np_ + ((lane >> 4) << 3) + (lane & 7); kc = (lane >> 3) & 1
                        kaddr.append(sK + half * BN * 128 + kr * 128 + (((chunk0 + kc) ^ (kr & 7)) << 4))
                    b = ldsm_x4(kaddr)
                    for h in range(2):
                        # mma m16n8k16: build A (16x16) and B (16x8) from fragments
                        A = np.zeros((16, 16)); B = np.zeros((16, 8))
                        for lane in range(32):
                            g, t = lane // 4, lane % 4
                            A[g, 2*t:2*t+2] = a[lane][0]; A[g+8, 2*t:2*t+2] = a[lane][1]
                            A[g, 8+2*t:8+2*t+2] = a[lane][2]; A[g+8, 8+2*t:8+2*t+2] = a[lane][3]
                            B[2*t:2*t+2, g] = b[lane][2*h]; B[8+2*t:8+2*t+2, g] = b[lane][2*h+1]
                        C = A @ B
                        for lane in range(32):
                            g, t = lane // 4, lane % 4
                            base = 8 * np_ + 4 * h
                            sc[lane, base + 0] += C[g, 2*t]; sc[lane, base + 1] += C[g, 2*t+1]
                            sc[lane, base + 2] += C[g+8, 2*t]; sc[lane, base + 3] += C[g+8, 2*t+1]
            S = Q @ K.T
            for lane in range(32):
                g, t = lane // 4, lane % 4
                row0 = wg * 64 + w * 16 + g
                for i in range(BN // 2):
                    n, hr, e = i >> 2, (i >> 1) & 1, i & 1
                    if sc[lane, i] != S[row0 + 8 * hr, 8 * n + 2 * t + e]: bad += 1
    print("D", D, "bad", bad)
