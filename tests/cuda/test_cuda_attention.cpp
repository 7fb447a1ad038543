// seqpar's flash attention on the GPU beyond the op harness's cases (tests/ops/op_harness.h runs
// every attention case on every CUDA path in test_cuda_op_harness.cpp): every instantiated tile
// shape, GradMode::kWrite against kAccumulate into zeros, a ring step's split keys merged, the
// merge alone, the entry checks; the flash kernels in bf16 and in f16. Same rule and helpers as the
// harness: the GPU's relative L2 error against the f64 reference within 2x the same-dtype (bf16 or
// f16) reference's, outputs poisoned with NaN.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "attention/cuda/attention_cuda.h"
#include "attention/cuda/attn_launch.h"
#include "cli/bench_attention.h"
#include "core/tensor.h"
#include "cuda/cuda_test_util.h"
#include "ops/op_harness.h"

namespace seqpar {
namespace {

using namespace optest;
constexpr double kInf = std::numeric_limits<double>::infinity();
const Rule kGpuRule{1e-6, false};
const Device kGpu = Device::cuda(0);

// kWrite stores what kAccumulate adds to zeros: dk/dv bit for bit (each key's CTA sums in a fixed
// order; dq goes through f32 atomics in varying order, so the harness's rule covers it).
void expect_write_equals_accumulate(const AttnCase& c, const Backend& b) {
  SCOPED_TRACE(c.name + " on " + b.name + ": kWrite vs kAccumulate into zeros");
  const AttnInputs in = attn_inputs(c);  // kWrite: the starting gradients are zeros
  AttnCase acc = c;
  acc.mode = GradMode::kAccumulate;
  const AttnResult w = run_attention(c, in, b), a = run_attention(acc, in, b);
  EXPECT_EQ(w.dk, a.dk);
  EXPECT_EQ(w.dv, a.dv);
}

std::vector<AttnCase> cases_named(const std::string& prefix) {
  std::vector<AttnCase> r;
  for (const AttnCase& c : attn_cases())
    if (c.name.rfind(prefix, 0) == 0) r.push_back(c);
  EXPECT_FALSE(r.empty()) << "no attention case named " << prefix;
  return r;
}

void expect_ran(const AttnCase& c, const Backend& b) {
  std::string why;
  EXPECT_TRUE(check_attention(c, b, &why)) << c.name << " on " << b.name << ": " << why;
}

// Every instantiated tile shape of the mma.sync kernels (on sm_90 the wgmma kernels are the
// default: the tiles are reached through the policy's FlashKernel::kMma), on two documents, in
// both 16-bit types.
TEST(CudaAttention, EveryTileShape) {
  REQUIRE_GPU();
  for (const DType dt : testing::flash_dtypes())
    for (const AttnCase& c : cases_named("two docs GQA T=261")) {
      const int D = static_cast<int>(c.D);
      const std::vector<cuda_attn::FwdTile> fwd = cuda_attn::fwd_tiles(D);
      const std::vector<cuda_attn::BwdTile> bwd = cuda_attn::bwd_tiles(D);
      ASSERT_FALSE(fwd.empty() || bwd.empty());
      for (size_t n = 0; n < std::max(fwd.size(), bwd.size()); ++n) {
        const cuda_attn::FwdTile& f = fwd[n % fwd.size()];
        const cuda_attn::BwdTile& bt = bwd[n % bwd.size()];
        Backend b = testing::flash_backend(FlashKernel::kMma, dt);
        b.attention.fwd_tile = {f.bm, f.bn, f.warps};
        b.attention.bwd_tile = {bt.bm, bt.bn, bt.warps};
        b.name += " fwd " + flash_tile_str(b.attention.fwd_tile) + " bwd " + flash_tile_str(b.attention.bwd_tile);
        expect_ran(c, b);
      }
    }
}

// GradMode::kWrite for every backward tile shape, with whole key tiles that no query sees (the
// kernel must still store their zero dk/dv), keys partly seen, and query rows that see nothing
// (dq 0); 16-bit (bf16, f16) and f32 gradients (the harness checks the unseen rows and keys exactly).
TEST(CudaAttention, WriteModeEveryBwdTile) {
  REQUIRE_GPU();
  for (const DType dt : testing::flash_dtypes())
    for (const AttnCase& c : cases_named("unseen key tiles Tq=300 Tk=400")) {
      ASSERT_EQ(c.mode, GradMode::kWrite);
      for (const cuda_attn::BwdTile& t : cuda_attn::bwd_tiles(static_cast<int>(c.D))) {
        Backend b = testing::flash_backend(FlashKernel::kMma, dt);  // the tiles are the mma kernel's
        b.attention.bwd_tile = {t.bm, t.bn, t.warps};
        b.name += " bwd " + flash_tile_str(b.attention.bwd_tile);
        expect_ran(c, b);
        expect_write_equals_accumulate(c, b);
      }
    }
}

// The same on every write case of the harness, both flash kernel families (the default tiles), in
// both 16-bit types.
TEST(CudaAttention, WriteEqualsAccumulateIntoZeros) {
  REQUIRE_GPU();
  int compared = 0;
  for (const Backend& b : {testing::flash_backend(FlashKernel::kMma), testing::flash_backend(FlashKernel::kWgmma),
                           testing::flash_backend(FlashKernel::kMma, DType::kF16),
                           testing::flash_backend(FlashKernel::kWgmma, DType::kF16)}) {
    for (const AttnCase& c : attn_cases()) {
      if (c.mode != GradMode::kWrite || !attn_unsupported(c, b).empty()) continue;
      expect_write_equals_accumulate(c, b);
      ++compared;
    }
  }
  EXPECT_GT(compared, 0);
}

// Keys in two blocks (a ring step): forward on each, attn_merge, then each block's backward with
// the merged out/lse accumulating into one dq: together they must equal the whole. q, k, v, dout
// of `dt` (bf16 or f16); f32 outputs and gradients, as a ring's accumulators.
void split_keys_merge_equals_full(int64_t head_dim, DType dt) {
  SCOPED_TRACE("D=" + std::to_string(head_dim) + " " + std::string(dtype_name(dt)));
  AttnCase c = attn_one_doc("split keys", 257, 4, 2, head_dim, true);
  c.out_f32 = true;
  c.grad_f32 = true;
  c.seed = 77;
  const AttnInputs in = attn_inputs(c);
  const AttnRef exact = attn_reference(c, in, false), lowp = attn_reference(c, in, dt);
  const int64_t split = 130, H = c.H, Hkv = c.Hkv, D = c.D, Tq = c.Tq;
  const Shape qs{Tq, H, D}, ks{c.Tk, Hkv, D};
  Tensor q = make_tensor(qs, in.q, dt, kGpu), dout = make_tensor(qs, in.dout, dt, kGpu);
  Tensor k = make_tensor(ks, in.k, dt, kGpu), v = make_tensor(ks, in.v, dt, kGpu);
  const TokenMeta qm{Tensor::from_vector<int32_t>({Tq}, c.qseg), Tensor::from_vector<int32_t>({Tq}, c.qpos)};
  const TokenMeta km{Tensor::from_vector<int32_t>({c.Tk}, c.kseg), Tensor::from_vector<int32_t>({c.Tk}, c.kpos)};
  const int64_t bounds[3] = {0, split, c.Tk};

  // Block 1 (keys >= split) first: early queries see none of it (lse -inf); its out rows there are
  // then poisoned, since an empty accumulator's out must not be read by the merge.
  Tensor out_acc = poisoned(qs, DType::kF32, kGpu), lse_acc = poisoned({Tq, H}, DType::kF32, kGpu);
  Tensor out_part = poisoned(qs, DType::kF32, kGpu), lse_part = poisoned({Tq, H}, DType::kF32, kGpu);
  {
    Tensor kb = k.rows(bounds[1], bounds[2]), vb = v.rows(bounds[1], bounds[2]);
    cuda_attn::attn_forward(out_acc, lse_acc, q, kb, vb, AttnArgs{qm, km.rows(bounds[1], bounds[2]), true, c.scale()});
    std::vector<float> l = lse_acc.to_f32_vector();
    std::vector<float> o = out_acc.to_f32_vector();
    int empty_rows = 0;
    for (int64_t r = 0; r < Tq * H; ++r) {
      if (l[r] != -INFINITY) continue;
      ++empty_rows;
      for (int64_t d = 0; d < D; ++d) {
        EXPECT_EQ(o[r * D + d], 0.f) << "row with no visible key must have out 0";
        o[r * D + d] = NAN;
      }
    }
    EXPECT_EQ(empty_rows, split * H);  // queries 0..split-1 see no key >= split
    out_acc.copy_from(Tensor::from_vector<float>(qs, o));
  }
  {
    Tensor kb = k.rows(bounds[0], bounds[1]), vb = v.rows(bounds[0], bounds[1]);
    cuda_attn::attn_forward(out_part, lse_part, q, kb, vb,
                            AttnArgs{qm, km.rows(bounds[0], bounds[1]), true, c.scale()});
  }
  cuda_attn::attn_merge(out_acc, lse_acc, out_part, lse_part);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_within_2x("merged out", values_of(out_acc), lowp.out, exact.out, kGpuRule);
  expect_lse("merged lse", values_of(lse_acc), exact.lse, 1e-4);

  Tensor dq = make_tensor(qs, in.dq0, DType::kF32, kGpu);
  Tensor dk = make_tensor(ks, in.dk0, DType::kF32, kGpu), dv = make_tensor(ks, in.dv0, DType::kF32, kGpu);
  for (int b = 0; b < 2; ++b) {
    Tensor kb = k.rows(bounds[b], bounds[b + 1]), vb = v.rows(bounds[b], bounds[b + 1]);
    Tensor dkb = dk.rows(bounds[b], bounds[b + 1]), dvb = dv.rows(bounds[b], bounds[b + 1]);
    cuda_attn::attn_backward(dq, dkb, dvb, dout, q, kb, vb, out_acc, lse_acc,
                             AttnArgs{qm, km.rows(bounds[b], bounds[b + 1]), true, c.scale()});
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_within_2x("dq (two key blocks)", values_of(dq), lowp.dq, exact.dq, kGpuRule);
  expect_within_2x("dk (two key blocks)", values_of(dk), lowp.dk, exact.dk, kGpuRule);
  expect_within_2x("dv (two key blocks)", values_of(dv), lowp.dv, exact.dv, kGpuRule);
}

TEST(CudaAttention, SplitKeysMergeEqualsFull) {
  REQUIRE_GPU();
  for (int64_t D : {96, 128}) split_keys_merge_equals_full(D, DType::kBF16);
}

TEST(CudaAttention, SplitKeysMergeEqualsFullF16) {
  REQUIRE_GPU();
  for (int64_t D : {64, 96, 128}) split_keys_merge_equals_full(D, DType::kF16);
}

// attn_merge alone, 16-bit (`dt`: bf16 or f16) outputs, against the formula in double; -inf on
// either side.
void merge_matches_the_formula(DType dt) {
  SCOPED_TRACE(std::string(dtype_name(dt)));
  const int64_t T = 37, H = 3, D = 128, rows = T * H;
  std::vector<float> oa = stored(random_values(rows * D, 91), dt);
  const std::vector<float> op = stored(random_values(rows * D, 92), dt);
  std::vector<float> la = random_values(rows, 93, -3.f, 5.f), lp = random_values(rows, 94, -3.f, 5.f);
  for (int64_t r = 0; r < rows; r += 7) la[r] = -INFINITY;
  for (int64_t r = 3; r < rows; r += 5) lp[r] = -INFINITY;
  std::vector<double> want_o(rows * D), want_lo(rows * D), want_l(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const double a = la[r], p = lp[r];
    double wa = 1, wp = 0, l = a;
    if (p != -kInf) {
      if (a == -kInf) {
        wa = 0, wp = 1, l = p;
      } else {
        const double mx = std::max(a, p);
        l = mx + std::log(std::exp(a - mx) + std::exp(p - mx));
        wa = std::exp(a - l);
        wp = std::exp(p - l);
      }
    }
    want_l[r] = l;
    for (int64_t d = 0; d < D; ++d) {
      // Two empties give 0; an empty side's out is never read.
      const double x = a == -kInf && p == -kInf
                           ? 0.0
                           : (a != -kInf ? wa * oa[r * D + d] : 0.0) + (p != -kInf ? wp * op[r * D + d] : 0.0);
      want_o[r * D + d] = x;
      want_lo[r * D + d] = round_to(x, dt);
    }
  }
  for (int64_t r = 0; r < rows; r += 7)  // empty accumulator rows: out must not be read
    for (int64_t d = 0; d < D; ++d) oa[r * D + d] = NAN;
  Tensor out_acc = make_tensor({T, H, D}, oa, dt, kGpu), out_part = make_tensor({T, H, D}, op, dt, kGpu);
  Tensor lse_acc = make_tensor({T, H}, la, DType::kF32, kGpu), lse_part = make_tensor({T, H}, lp, DType::kF32, kGpu);
  cuda_attn::attn_merge(out_acc, lse_acc, out_part, lse_part);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_within_2x("merge out", values_of(out_acc), want_lo, want_o, kGpuRule);
  const std::vector<float> l = lse_acc.to_f32_vector();
  for (int64_t r = 0; r < rows; ++r) {
    if (want_l[r] == -kInf) {
      EXPECT_EQ(l[r], -INFINITY) << r;
    } else {
      EXPECT_NEAR(l[r], want_l[r], 1e-5 * (1 + std::abs(want_l[r]))) << r;
    }
  }
}

TEST(CudaAttention, MergeBf16) {
  REQUIRE_GPU();
  merge_matches_the_formula(DType::kBF16);
}

TEST(CudaAttention, MergeF16) {
  REQUIRE_GPU();
  merge_matches_the_formula(DType::kF16);
}

// launch_tile_stats: per tile {min seg, max seg, min pos, max pos} and, asked for, whether the tile is one run (one
// segment, pos = the first token's + offset), which lets the sm_90 kernels mask a boundary tile from its indices.
// Tiles of 64 over 300 tokens: a run; two segments; one segment whose positions are a run's with two swapped (the
// same min and max); one with a jump; a ragged last tile that is a run.
TEST(CudaAttention, TileStatsSayWhichTilesAreOneRun) {
  REQUIRE_GPU();
  constexpr int T = 300, kTile = 64, kTiles = (T + kTile - 1) / kTile;
  std::vector<int32_t> seg(T), pos(T);
  for (int i = 0; i < T; ++i) {
    seg[i] = i < 100 ? 0 : i < 256 ? 1 : 2;
    pos[i] = i < 100 ? i : i < 256 ? i - 100 : 1000 + (i - 256);
  }
  std::swap(pos[150], pos[151]);
  for (int i = 200; i < 256; ++i) pos[i] += 5;
  const std::vector<int32_t> want_runs = {1, 0, 0, 0, 1};

  int32_t *d_seg = nullptr, *d_pos = nullptr, *d_runs = nullptr;
  int4* d_stats = nullptr;
  ASSERT_EQ(cudaMalloc(&d_seg, T * sizeof(int32_t)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_pos, T * sizeof(int32_t)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_runs, kTiles * sizeof(int32_t)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_stats, kTiles * sizeof(int4)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_seg, seg.data(), T * sizeof(int32_t), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_pos, pos.data(), T * sizeof(int32_t), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_runs, 0x7f, kTiles * sizeof(int32_t)), cudaSuccess);
  cuda_attn::launch_tile_stats(d_stats, d_seg, d_pos, T, kTile, nullptr, d_runs);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<int32_t> runs(kTiles);
  std::vector<int4> stats(kTiles);
  ASSERT_EQ(cudaMemcpy(runs.data(), d_runs, kTiles * sizeof(int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(stats.data(), d_stats, kTiles * sizeof(int4), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(runs, want_runs);
  for (int t = 0; t < kTiles; ++t) {
    const int b = t * kTile, e = std::min(T, b + kTile);
    EXPECT_EQ(stats[t].x, *std::min_element(seg.begin() + b, seg.begin() + e)) << "tile " << t;
    EXPECT_EQ(stats[t].y, *std::max_element(seg.begin() + b, seg.begin() + e)) << "tile " << t;
    EXPECT_EQ(stats[t].z, *std::min_element(pos.begin() + b, pos.begin() + e)) << "tile " << t;
    EXPECT_EQ(stats[t].w, *std::max_element(pos.begin() + b, pos.begin() + e)) << "tile " << t;
  }
  // Without run flags the statistics are the same.
  ASSERT_EQ(cudaMemset(d_stats, 0, kTiles * sizeof(int4)), cudaSuccess);
  cuda_attn::launch_tile_stats(d_stats, d_seg, d_pos, T, kTile, nullptr);
  std::vector<int4> again(kTiles);
  ASSERT_EQ(cudaMemcpy(again.data(), d_stats, kTiles * sizeof(int4), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int t = 0; t < kTiles; ++t)
    EXPECT_TRUE(again[t].x == stats[t].x && again[t].y == stats[t].y && again[t].z == stats[t].z &&
                again[t].w == stats[t].w)
        << "tile " << t;
  cudaFree(d_seg);
  cudaFree(d_pos);
  cudaFree(d_runs);
  cudaFree(d_stats);
}

TEST(CudaAttention, RejectsBadInputs) {
  REQUIRE_GPU();
  const AttnCase c = attn_one_doc("bad", 16, 2, 2, 64, true);
  const TokenMeta m{Tensor::from_vector<int32_t>({16}, c.qseg), Tensor::from_vector<int32_t>({16}, c.qpos)};
  const AttnArgs args{m, m, true, c.scale()};
  const std::vector<float> x = random_values(16 * 2 * 64, 5);
  Tensor qf32 = make_tensor({16, 2, 64}, x, DType::kF32, kGpu), q = make_tensor({16, 2, 64}, x, DType::kBF16, kGpu);
  Tensor out = poisoned({16, 2, 64}, DType::kBF16, kGpu), lse = poisoned({16, 2}, DType::kF32, kGpu);
  EXPECT_THROW(cuda_attn::attn_forward(out, lse, qf32, q, q, args), Error);  // f32 q
  // D = 80: no kernel (64, 96 and 128 are instantiated).
  Tensor q80 = make_tensor({16, 2, 80}, random_values(16 * 2 * 80, 6), DType::kBF16, kGpu);
  Tensor out80 = poisoned({16, 2, 80}, DType::kBF16, kGpu);
  EXPECT_THROW(cuda_attn::attn_forward(out80, lse, q80, q80, q80, args), Error);
  Tensor k3 = make_tensor({16, 3, 64}, random_values(16 * 3 * 64, 7), DType::kBF16, kGpu);
  EXPECT_THROW(cuda_attn::attn_forward(out, lse, q, k3, k3, args), Error);  // H % Hkv != 0
  // A 16-bit out of the other 16-bit type than q (the kernels write q's), and mixed q / k types.
  Tensor q16 = make_tensor({16, 2, 64}, x, DType::kF16, kGpu);
  EXPECT_THROW(cuda_attn::attn_forward(out, lse, q16, q16, q16, args), Error);
  Tensor out16 = poisoned({16, 2, 64}, DType::kF16, kGpu);
  EXPECT_THROW(cuda_attn::attn_forward(out16, lse, q16, q, q, args), Error);
  // A tile the table does not instantiate for D is an InputError naming the setting.
  AttnArgs bad_tile = args;
  bad_tile.policy.fwd_tile = {16, 16, 1};
  try {
    cuda_attn::attn_forward(out, lse, q, q, q, bad_tile);
    ADD_FAILURE() << "an uninstantiated tile was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("SEQPAR_FLASH_FWD_TILE)=16x16x1 is not an instantiated tile for D=64"),
              std::string::npos)
        << e.what();
  }
}

// Not a test: runs `seqpar bench attention` from this binary, for the GPU machine's scripts
// (--gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Bench*'). Settings from the
// environment: SEQPAR_BENCH_SEQ_LENS, SEQPAR_BENCH_HEAD_DIMS, SEQPAR_BENCH_PASSES, SEQPAR_BENCH_OUT.
TEST(CudaAttention, DISABLED_Bench) {
  REQUIRE_GPU();
  BenchAttentionOptions o;
  if (const char* e = std::getenv("SEQPAR_BENCH_SEQ_LENS")) o.seq_lens = e;
  if (const char* e = std::getenv("SEQPAR_BENCH_HEAD_DIMS")) o.head_dims = e;
  if (const char* e = std::getenv("SEQPAR_BENCH_PASSES")) o.passes = e;
  if (const char* e = std::getenv("SEQPAR_BENCH_OUT")) o.out = e;
  EXPECT_EQ(run_bench_attention(o), 0);
}

}  // namespace
}  // namespace seqpar
