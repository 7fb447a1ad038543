// Sequence-parallel attention on the GPU, ranks as threads on one device: the ring's error
// against the f64 reference must not grow with the ring degree. Each hop's partial output and
// each hop's dk/dv contribution is rounded to the 16-bit type (bf16, or f16: an fp16 run's) once by
// its kernel; the running output, dq and the travelling dk/dv accumulators stay in f32 and are
// rounded once at the end (parallel/sp_attention.cpp; the LSE merge of f16 partials into f32). The
// rule is flash-attention's: within 2x the error of the same computation on one rank
// (LocalAttention, same 16-bit type). The errors are printed per degree.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mesh.h"
#include "core/device.h"
#include "cuda_test_util.h"
#include "ops/op_harness.h"
#include "parallel/sp_attention.h"
#include "test_util.h"

namespace seqpar {
namespace {

const Device kGpu = Device::cuda(0);

// ||got - ref|| / ||ref||, ref in f64.
double rel_to_ref(const std::vector<float>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

struct Errors {
  double out = 0, dq = 0, dk = 0, dv = 0;
};

// One causal sequence of S tokens, H query heads on Hkv KV heads of D; inputs exactly
// representable in bf16 (the reference sees the values the GPU sees).
struct RingProblem {
  int64_t S, H, Hkv, D;
  Tensor q, k, v, dout;  // host f32, bf16-exact
  std::vector<int32_t> seg, pos;
  float scale() const { return 1.f / std::sqrt(static_cast<float>(D)); }
};

Tensor bf16_exact(const Shape& shape, uint64_t seed, float lo, float hi) {
  return testing::random_tensor(shape, seed, lo, hi).to_dtype(DType::kBF16).to_dtype(DType::kF32);
}

RingProblem make_ring_problem(int64_t S, int64_t H, int64_t Hkv, int64_t D) {
  RingProblem p{S, H, Hkv, D, bf16_exact({S, H, D}, 11, -2.f, 2.f), bf16_exact({S, Hkv, D}, 12, -2.f, 2.f),
                bf16_exact({S, Hkv, D}, 13, -1.f, 1.f), bf16_exact({S, H, D}, 14, -1.f, 1.f), {}, {}};
  for (int64_t i = 0; i < S; ++i) {
    p.seg.push_back(0);
    p.pos.push_back(static_cast<int32_t>(i));
  }
  return p;
}

std::vector<double> doubles(const Tensor& t) {
  const std::vector<float> f = t.to_f32_vector();
  return {f.begin(), f.end()};
}

// Stream indices rank r of P holds: contiguous, or zigzag (chunks r and 2P-1-r of 2P).
std::vector<int64_t> rank_rows(int64_t S, int P, int r, bool zigzag) {
  std::vector<int64_t> rows;
  if (!zigzag) {
    for (int64_t t = r * S / P; t < (r + 1) * S / P; ++t) rows.push_back(t);
    return rows;
  }
  const int64_t chunk = S / (2 * P);
  for (int64_t c : {int64_t{r}, int64_t{2 * P - 1 - r}})
    for (int64_t t = c * chunk; t < (c + 1) * chunk; ++t) rows.push_back(t);
  return rows;
}

Tensor take(const Tensor& x, const std::vector<int64_t>& rows) {
  Shape shape = x.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  const int64_t w = x.numel() / x.dim(0);
  std::vector<float> out;
  const float* src = x.data<float>();
  for (int64_t t : rows) out.insert(out.end(), src + t * w, src + (t + 1) * w);
  return Tensor::from_vector<float>(shape, out);
}

TokenMeta meta_rows(const RingProblem& p, const std::vector<int64_t>& rows) {
  std::vector<int32_t> seg, pos;
  for (int64_t t : rows) {
    seg.push_back(p.seg[t]);
    pos.push_back(p.pos[t]);
  }
  const auto n = static_cast<int64_t>(rows.size());
  return {Tensor::from_vector<int32_t>({n}, seg), Tensor::from_vector<int32_t>({n}, pos)};
}

struct Outputs {
  std::vector<float> out, dq, dk, dv;  // stream order
};

// make_sp_attention over a ring of P ranks on the one GPU (P = 1: LocalAttention), in `dt` (bf16 or
// f16).
Outputs run_ring(const RingProblem& p, int P, bool zigzag, const AttentionPolicy& policy, DType dt) {
  std::vector<std::vector<int64_t>> rows(P);
  std::vector<TokenMeta> metas;
  for (int r = 0; r < P; ++r) {
    rows[r] = rank_rows(p.S, P, r, zigzag);
    metas.push_back(meta_rows(p, rows[r]));
  }
  Outputs res;
  for (auto* v : {&res.out, &res.dq}) v->assign(static_cast<size_t>(p.S * p.H * p.D), NAN);
  for (auto* v : {&res.dk, &res.dv}) v->assign(static_cast<size_t>(p.S * p.Hkv * p.D), NAN);
  auto place = [&](std::vector<float>& dst, const Tensor& local, const std::vector<int64_t>& idx) {
    const std::vector<float> f = local.to_f32_vector();
    const int64_t w = local.numel() / local.dim(0);
    for (size_t t = 0; t < idx.size(); ++t)
      std::copy_n(f.begin() + static_cast<int64_t>(t) * w, w, dst.begin() + idx[t] * w);
  };
  run_local_ranks(P, [&](Communicator& world) {
    set_current_device(kGpu);
    const int r = world.rank();
    auto gpu = [&](const Tensor& host) { return host.to_dtype(dt).to(kGpu); };
    Tensor q = gpu(take(p.q, rows[r])), k = gpu(take(p.k, rows[r])), v = gpu(take(p.v, rows[r]));
    Tensor dout = gpu(take(p.dout, rows[r]));
    Tensor o = Tensor::empty(q.shape(), dt, kGpu), dq = Tensor::empty(q.shape(), dt, kGpu);
    Tensor dk = Tensor::empty(k.shape(), dt, kGpu), dv = Tensor::empty(v.shape(), dt, kGpu);
    std::unique_ptr<Attention> attn;
    std::unique_ptr<DeviceMesh> mesh;
    if (P == 1) {
      attn = std::make_unique<LocalAttention>(metas[0], policy);
    } else {
      mesh = std::make_unique<DeviceMesh>(world, sp_mesh_shape(SpMode::kRing, P, 0));
      attn = make_sp_attention(*mesh, metas, p.H, p.Hkv, policy);
    }
    auto ctx = attn->forward(q, k, v, o, p.scale());
    attn->backward(*ctx, dout, dq, dk, dv);
    place(res.out, o.to(Device::cpu()), rows[r]);
    place(res.dq, dq.to(Device::cpu()), rows[r]);
    place(res.dk, dk.to(Device::cpu()), rows[r]);
    place(res.dv, dv.to(Device::cpu()), rows[r]);
  });
  return res;
}

Errors errors_of(const Outputs& got, const optest::AttnRef& ref) {
  return {rel_to_ref(got.out, ref.out), rel_to_ref(got.dq, ref.dq), rel_to_ref(got.dk, ref.dk),
          rel_to_ref(got.dv, ref.dv)};
}

void ring_error_is_flat(const AttentionPolicy& policy, const std::string& name, DType dt = DType::kBF16) {
  const RingProblem p = make_ring_problem(4096, 2, 1, 128);
  const TokenMeta all = meta_rows(p, rank_rows(p.S, 1, 0, false));
  const optest::AttnRef ref = optest::attn_reference(doubles(p.q), doubles(p.k), doubles(p.v), doubles(p.dout), all,
                                                     all, p.H, p.Hkv, p.D, /*causal=*/true, p.scale());
  const Errors one = errors_of(run_ring(p, 1, false, policy, dt), ref);
  std::printf("[%s] S=%lld H=%lld Hkv=%lld D=%lld  P=1: out %.3e dq %.3e dk %.3e dv %.3e\n", name.c_str(),
              static_cast<long long>(p.S), static_cast<long long>(p.H), static_cast<long long>(p.Hkv),
              static_cast<long long>(p.D), one.out, one.dq, one.dk, one.dv);
  // Flash-attention's rule: within 2x the one-rank error. Rounding the running output or the
  // travelling dk/dv at every hop (what this replaced) grows about as sqrt(P) and fails at P >= 4.
  auto bound = [](double e1) { return 2 * e1; };
  auto flat = [](double e1) { return 1.25 * e1; };
  for (bool zigzag : {false, true}) {
    for (int P : {2, 4, 8}) {
      const Errors e = errors_of(run_ring(p, P, zigzag, policy, dt), ref);
      std::printf("[%s] ring %-10s P=%d: out %.3e dq %.3e dk %.3e dv %.3e\n", name.c_str(),
                  zigzag ? "zigzag" : "contiguous", P, e.out, e.dq, e.dk, e.dv);
      const std::string what = name + (zigzag ? " zigzag" : " contiguous") + " P=" + std::to_string(P);
      EXPECT_LE(e.out, bound(one.out)) << what << ": out";
      EXPECT_LE(e.dq, bound(one.dq)) << what << ": dq";
      EXPECT_LE(e.dk, bound(one.dk)) << what << ": dk";
      EXPECT_LE(e.dv, bound(one.dv)) << what << ": dv";
      // Flat: at most 25% above one rank's error at any degree (measured on the H200: <= 13% with
      // the f32 sums; the bf16 sums they replaced reached +34% at P = 4 and +100% at P = 8).
      EXPECT_LE(e.out, flat(one.out)) << what << ": out grows with the degree";
      EXPECT_LE(e.dq, flat(one.dq)) << what << ": dq grows with the degree";
      EXPECT_LE(e.dk, flat(one.dk)) << what << ": dk grows with the degree";
      EXPECT_LE(e.dv, flat(one.dv)) << what << ": dv grows with the degree";
    }
  }
}

TEST(CudaSpAttention, RingErrorDoesNotGrowWithDegreeFlash) {
  REQUIRE_GPU();
  AttentionPolicy policy;
  policy.backend = AttentionBackend::kFlash;
  ring_error_is_flat(policy, "flash");
}

// The same in f16 (an fp16 run's ring): the flash kernels' f16 instantiations on every hop, f16
// partials merged into f32 accumulators.
TEST(CudaSpAttention, RingErrorDoesNotGrowWithDegreeFlashF16) {
  REQUIRE_GPU();
  AttentionPolicy policy;
  policy.backend = AttentionBackend::kFlash;
  ring_error_is_flat(policy, "flash-f16", DType::kF16);
}

TEST(CudaSpAttention, RingErrorDoesNotGrowWithDegreeCudnn) {
  REQUIRE_GPU();
  if (cuda_attn::cudnn_runtime_version() == 0) GTEST_SKIP() << "built without cuDNN";
  AttentionPolicy policy;
  policy.backend = AttentionBackend::kCudnn;  // the diagonal block on cuDNN, f32 accumulators
  ring_error_is_flat(policy, "cudnn");
}

}  // namespace
}  // namespace seqpar
