#include "cli/bench_sp_attention.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "attention/attention_backend.h"
#include "cli/bench_util.h"
#include "cli/commands.h"
#include "cli/kernel_env.h"
#include "comm/mesh.h"
#include "core/error.h"
#include "core/log.h"
#include "data/sp_batch.h"
#include "kernels/ops.h"
#include "parallel/sp_attention.h"
#include "train/job.h"

#if defined(SEQPAR_WITH_CUDA)
#include "attention/cuda/attention_cuda.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/launchers.h"
#endif

namespace seqpar {

void add_bench_sp_attention_options(CLI::App& cmd, BenchSpAttentionOptions& o) {
  cmd.add_option("--sp", o.sp, "sequence-parallel degree (ranks sharing the sequence)")->capture_default_str();
  cmd.add_option("--sp-mode", o.sp_mode, "ulysses | ring | hybrid")->capture_default_str();
  cmd.add_option("--ulysses-degree", o.ulysses_degree, "hybrid: ranks per Ulysses group");
  cmd.add_option("--sp-layout", o.layout, "ring/hybrid token layout: zigzag | contiguous")->capture_default_str();
  cmd.add_option("--tokens-per-rank", o.tokens_per_rank, "tokens each rank holds, comma-separated")
      ->capture_default_str();
  cmd.add_option("--heads", o.heads, "H, query heads")->capture_default_str();
  cmd.add_option("--kv-heads", o.kv_heads, "Hkv values, comma-separated (0: = H)")->capture_default_str();
  cmd.add_option("--head-dim", o.head_dim, "D")->capture_default_str();
  cmd.add_option("--head-groups", o.head_groups,
                 "Ulysses: head groups pipelined per layer (1 = all-to-all, then compute; 0 = default, "
                 "SEQPAR_ULYSSES_HEAD_GROUPS or 2)")
      ->capture_default_str();
  cmd.add_option("--warmup", o.warmup, "untimed iterations per shape")->capture_default_str();
  cmd.add_option("--iters", o.iters, "timed iterations per shape (the median is reported)")->capture_default_str();
  cmd.add_option("--single", o.single, "also time the whole sequence on one device (the scaling baseline)")
      ->capture_default_str();
  cmd.add_option("--device", o.device, "cuda | cpu (cpu: f32, a functional check, not a benchmark)")
      ->capture_default_str();
  cmd.add_option("--transport", o.transport,
                 "auto | local | nccl: ranks as threads of this process, or one process per GPU under a launcher")
      ->capture_default_str();
  cmd.add_option("--backend", o.backend, "CUDA attention: flash | cudnn")->capture_default_str();
  cmd.add_option("--out", o.out, "also append the JSON lines to this file");
}

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Random operands in [-1, 1] (never zeros): bf16 on a GPU, f32 on the CPU.
Tensor random_operand(const Shape& shape, Device device, uint64_t seed) {
  if (device.is_cuda()) {
#if defined(SEQPAR_WITH_CUDA)
    Tensor t = Tensor::empty(shape, DType::kBF16, device);
    cuda_kernels::fill_uniform(t.raw(), DType::kBF16, t.numel(), seed, -1.f, 1.f, current_stream());
    return t;
#endif
  }
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  return t;
}

// Median over iterations of the slowest rank's wall time of fn (ms), every iteration between a
// barrier and a device sync so that ranks start together and GPU work is counted.
double time_collective(Communicator& world, Device device, int warmup, int iters, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    synchronize_device(device);
    world.barrier();
    const auto t0 = Clock::now();
    fn();
    synchronize_device(device);
    Tensor t = Tensor::from_vector<float>({1}, {std::chrono::duration<float, std::milli>(Clock::now() - t0).count()});
    world.all_reduce(t, ReduceOp::kMax);
    ms.push_back(t.data<float>()[0]);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Shape3 {
  int64_t s, H, Hkv, D;
};

// The communication of one forward + backward of this SP mode for a shape, with the traffic of an
// even head split (sp_attention.cpp): Ulysses all-to-alls of q, k, v, out (forward) and dout, dq,
// dk, dv (backward); ring hops of k, v (r - 1 in forward and backward) and of dk, dv (r).
class CommPattern {
 public:
  CommPattern(DeviceMesh& mesh, const Shape3& sh, DType dt, Device dev) : mesh_(mesh) {
    const int u = mesh.shape().ulysses;
    const int64_t hk = std::max<int64_t>(1, sh.Hkv / u);  // KV heads each Ulysses rank holds
    q_ = Tensor::zeros({sh.s * sh.H * sh.D}, dt, dev);
    kv_ = Tensor::zeros({sh.s * hk * u * sh.D}, dt, dev);  // u chunks of s*hk*D
    q_recv_ = Tensor::empty(q_.shape(), dt, dev);
    kv_recv_ = Tensor::empty(kv_.shape(), dt, dev);
    // A ring block: the ulysses group's tokens and this rank's heads.
    block_ = Tensor::zeros({sh.s * u * hk * sh.D}, dt, dev);
    block_recv_ = Tensor::empty(block_.shape(), dt, dev);
  }

  void all_to_alls() {
    if (mesh_.shape().ulysses == 1) return;
    for (int pass = 0; pass < 2; ++pass) {  // forward: q, k, v, out; backward: dout, dk, dv, dq
      all_to_all_equal(mesh_.ulysses(), q_recv_, q_);
      all_to_all_equal(mesh_.ulysses(), kv_recv_, kv_);
      all_to_all_equal(mesh_.ulysses(), kv_recv_, kv_);
      all_to_all_equal(mesh_.ulysses(), q_recv_, q_);
    }
  }
  void hop() {
    Communicator& ring = mesh_.ring();
    const int r = ring.size(), me = ring.rank();
    ring.send_recv({{(me + 1) % r, block_}, {(me + 1) % r, block_}},
                   {{(me - 1 + r) % r, block_recv_}, {(me - 1 + r) % r, block_recv_}});
  }
  void ring_hops() {
    const int r = mesh_.shape().ring;
    for (int i = 0; i < 3 * (r - 1) + (r > 1 ? 1 : 0); ++i) hop();  // k,v fwd + bwd; dk,dv r hops
  }
  void all() {
    all_to_alls();
    ring_hops();
  }
  void one_all_to_all() { all_to_all_equal(mesh_.ulysses(), q_recv_, q_); }
  size_t a2a_bytes() const { return q_.nbytes(); }
  size_t hop_bytes() const { return 2 * block_.nbytes(); }

 private:
  DeviceMesh& mesh_;
  Tensor q_, kv_, q_recv_, kv_recv_, block_, block_recv_;
};

}  // namespace

int run_bench_sp_attention(const BenchSpAttentionOptions& o) {
  const Device device = parse_device(o.device);
  const Transport transport = parse_transport(o.transport);
  const SpMode mode = parse_sp_mode(o.sp_mode, "--sp-mode");
  const MeshShape shape = sp_mesh_shape(mode, o.sp, o.ulysses_degree);
  const SpLayout layout = shape.ring > 1 ? parse_sp_layout(o.layout, "--sp-layout") : SpLayout::kContiguous;
  const std::vector<int64_t> tokens = parse_int_list(o.tokens_per_rank, "--tokens-per-rank");
  std::vector<int64_t> kv_heads = parse_int_list(o.kv_heads, "--kv-heads", /*allow_zero=*/true);
  for (int64_t& h : kv_heads) h = h == 0 ? o.heads : h;
  for (int64_t h : kv_heads) {
    SEQPAR_INPUT_CHECK(o.heads % h == 0, "--kv-heads={}: {} does not divide --heads={}", o.kv_heads, h, o.heads);
    validate_sp_heads(o.heads, h, shape.ulysses);
  }
  SEQPAR_INPUT_CHECK(o.warmup >= 0 && o.iters >= 1, "--warmup={} must be >= 0 and --iters={} >= 1", o.warmup, o.iters);
  const AttentionBackend backend = parse_attention_backend(o.backend);
  if (device.is_cuda()) {
    SEQPAR_INPUT_CHECK(cuda_attention_head_dim(o.head_dim), "--head-dim={}: the CUDA attention kernels take {}",
                       o.head_dim, kCudaAttentionHeadDims);
  }
  for (int64_t s : tokens)
    SEQPAR_INPUT_CHECK(s * o.sp % sp_layout_multiple(layout, o.sp) == 0,
                       "--tokens-per-rank={}: the {} layout needs the sequence (sp × tokens = {}) to be a multiple "
                       "of {}",
                       s, sp_layout_name(layout), s * o.sp, sp_layout_multiple(layout, o.sp));
  SEQPAR_INPUT_CHECK(o.head_groups >= 0, "--head-groups={} must be >= 0", o.head_groups);
  const int head_groups = o.head_groups > 0 ? o.head_groups : process_kernel_policy().ulysses_head_groups;
  // The environment's kernel choices, with --backend's (the CPU has one attention).
  AttentionPolicy policy = process_kernel_policy().attention;
  policy.backend = backend;
  const DType dt = device.is_cuda() ? DType::kBF16 : DType::kF32;
  const std::string config = fmt::format("bench sp-attention {} {} {} {} {} {} {} {}", o.sp, o.sp_mode,
                                         o.ulysses_degree, o.layout, o.tokens_per_rank, o.heads, o.kv_heads, o.head_dim);
  if (o.sp > 1 && !device.is_cuda()) set_cpu_gemm_threads(1);

  JsonLines sink(hosts_leader(device, transport) ? o.out : std::string());
  run_job(o.sp, device, transport, config, [&](JobRank& job) {
    DeviceMesh mesh(job.world, shape);
    const Device dev = job.device;
    for (int64_t Hkv : kv_heads) {
      for (int64_t s : tokens) {
        const int64_t S = s * o.sp, H = o.heads, D = o.head_dim;
        const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
        // One causal sequence; every rank's shard metadata from the same layout the trainer uses.
        Sequence row{std::vector<int32_t>(S, 0), std::vector<int32_t>(S, 0), {}};
        const SpBatch batch = make_sp_batch({row}, o.sp, layout);
        std::vector<TokenMeta> meta;
        for (const Shard& sh : batch.shards) meta.push_back(shard_token_meta(sh));
        std::unique_ptr<Attention> attn = make_sp_attention(mesh, meta, H, Hkv, policy, head_groups);
        const uint64_t seed = 1000 * static_cast<uint64_t>(mesh.sp_rank()) + 1;
        Tensor q = random_operand({s, H, D}, dev, seed), k = random_operand({s, Hkv, D}, dev, seed + 1);
        Tensor v = random_operand({s, Hkv, D}, dev, seed + 2), dout = random_operand({s, H, D}, dev, seed + 3);
        Tensor out = Tensor::empty(q.shape(), dt, dev), dq = Tensor::empty(q.shape(), dt, dev);
        Tensor dk = Tensor::empty(k.shape(), dt, dev), dv = Tensor::empty(v.shape(), dt, dev);
        const double ms = time_collective(job.world, dev, o.warmup, o.iters, [&] {
          auto ctx = attn->forward(q, k, v, out, scale);
          attn->backward(*ctx, dout, dq, dk, dv);
        });
        q = k = v = dout = out = dq = dk = dv = Tensor();

        CommPattern comm(mesh, {s, H, Hkv, D}, dt, dev);
        const double comm_ms = o.sp > 1 ? time_collective(job.world, dev, o.warmup, o.iters, [&] { comm.all(); }) : 0;
        double a2a_ms = 0, hop_ms = 0;
        if (shape.ulysses > 1)
          a2a_ms = time_collective(job.world, dev, o.warmup, o.iters, [&] { comm.one_all_to_all(); });
        if (shape.ring > 1) hop_ms = time_collective(job.world, dev, o.warmup, o.iters, [&] { comm.hop(); });

        // The whole sequence on rank 0's device; the other ranks wait at the barrier.
        double single_ms = -1;
        if (o.single && job.leader) {
          LocalAttention local(token_meta_from_cu_seqlens({0, static_cast<int32_t>(S)}));
          Tensor Q = random_operand({S, H, D}, dev, 7), K = random_operand({S, Hkv, D}, dev, 8);
          Tensor V = random_operand({S, Hkv, D}, dev, 9), dO = random_operand({S, H, D}, dev, 10);
          Tensor O = Tensor::empty(Q.shape(), dt, dev), dQ = Tensor::empty(Q.shape(), dt, dev);
          Tensor dK = Tensor::empty(K.shape(), dt, dev), dV = Tensor::empty(V.shape(), dt, dev);
          std::vector<double> t;
          for (int i = 0; i < o.warmup + o.iters; ++i) {
            synchronize_device(dev);
            const auto t0 = Clock::now();
            auto ctx = local.forward(Q, K, V, O, scale);
            local.backward(*ctx, dO, dQ, dK, dV);
            synchronize_device(dev);
            if (i >= o.warmup) t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
          }
          std::sort(t.begin(), t.end());
          single_ms = t[t.size() / 2];
        }
        job.world.barrier();
        if (!job.leader) continue;

        const double fwd_flops = 4.0 * S * S * H * D * 0.5;  // causal: half of the full matrix
        json line = {{"bench", "sp_attention"},
                     {"impl", "seqpar"},
                     {"backend", device.is_cuda() ? o.backend : "cpu"},
                     {"transport", job_transport(transport, device) == Transport::kNccl ? "nccl" : "local"},
                     {"sp", o.sp},
                     {"mode", o.sp_mode},
                     {"ulysses", shape.ulysses},
                     {"ring", shape.ring},
                     {"head_groups", shape.ulysses > 1 ? std::min<int64_t>(head_groups, H / shape.ulysses) : 1},
                     {"layout", sp_layout_name(layout)},
                     {"tokens_per_rank", s},
                     {"seq_len", S},
                     {"H", H},
                     {"Hkv", Hkv},
                     {"D", D},
                     {"causal", true},
                     {"ms", ms},
                     {"tflops", 3.5 * fwd_flops / (ms * 1e-3) / 1e12 / o.sp},
                     {"comm_ms", comm_ms}};
        if (single_ms > 0) {
          line["ms_single"] = single_ms;
          line["efficiency"] = single_ms / (o.sp * ms);
          if (comm_ms > 0) line["hidden"] = std::clamp((single_ms / o.sp + comm_ms - ms) / comm_ms, 0.0, 1.0);
        }
        if (a2a_ms > 0) line["a2a_GBps"] = comm.a2a_bytes() * (shape.ulysses - 1.0) / shape.ulysses / (a2a_ms * 1e6);
        if (hop_ms > 0) line["p2p_GBps"] = comm.hop_bytes() / (hop_ms * 1e6);
        line["date"] = utc_now("%Y-%m-%dT%H:%M:%SZ");
        sink.write(line);
      }
    }
  });
  return 0;
}

}  // namespace seqpar
