// SP degree P reproduces degree 1 for the whole model: run_fwdbwd (forward, backward, one AdamW
// step) on P in-process ranks in every SP mode and layout against P = 1, on tiny random HF
// checkpoints (MHA, GQA, KV heads fewer than the Ulysses degree, uneven head splits). Also the
// attention on the data pipeline's own shards (make_sp_batch: packed, variable-length rows), which
// run_fwdbwd's [B, S] input cannot express.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/allocator.h"
#include "comm/mesh.h"
#include "data/sp_batch.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/llama.h"
#include "parallel/sp_attention.h"
#include "test_util.h"
#include "train/fwdbwd.h"
#include "train/trainer.h"

namespace seqpar {
namespace {

using testing::random_tensor;
using testing::rel_error;

constexpr double kTol = 1e-5;

// ---- tiny random HF checkpoints ----------------------------------------------------------

LlamaConfig tiny_config(int64_t H, int64_t Hkv, int64_t D, bool tied) {
  LlamaConfig c;
  c.vocab_size = 50;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = H;
  c.num_kv_heads = Hkv;
  c.head_dim = D;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 128;
  c.tie_word_embeddings = tied;
  c.rope.theta = 10000.0;
  return c;
}

// config.json + model.safetensors with random weights from `seed`: projections and embeddings
// uniform in [-0.2, 0.2) (logits far from uniform), norm weights in [0.8, 1.2).
std::string write_checkpoint(const LlamaConfig& config, uint64_t seed) {
  const std::string dir = testing::temp_dir();
  write_file_atomic(dir + "/config.json", hf_llama_config_json(config));
  std::vector<std::pair<std::string, Tensor>> weights;
  uint64_t s = seed;
  for (auto& [name, shape] : LlamaParams::shapes(config)) {
    const bool norm = shape.size() == 1;
    weights.emplace_back(name, random_tensor(shape, s++, norm ? 0.8f : -0.2f, norm ? 1.2f : 0.2f));
  }
  write_safetensors(dir + "/model.safetensors", weights);
  return dir;
}

// ---- batches ------------------------------------------------------------------------------

struct Batch {
  Tensor input_ids, labels;  // i32 [B, S]
};

// Pretraining: labels = input_ids.
Batch pretrain_batch(int64_t B, int64_t S, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(B * S));
  for (auto& x : ids) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(V));
  return {Tensor::from_vector<int32_t>({B, S}, ids), Tensor::from_vector<int32_t>({B, S}, ids)};
}

// SFT: the first half of the stream is prompt (-100): all of row 0 and the start of row 1, so
// the first contiguous shard has no good token at all.
Batch sft_batch(int64_t B, int64_t S, int64_t V, uint64_t seed) {
  Batch b = pretrain_batch(B, S, V, seed);
  int32_t* lab = b.labels.data<int32_t>();
  for (int64_t i = 0; i < (B * S) * 3 / 4; ++i) lab[i] = kIgnoreIndex;
  return b;
}

std::vector<Sequence> rows_of(const Batch& b) {
  std::vector<Sequence> rows;
  const int64_t B = b.input_ids.dim(0), S = b.input_ids.dim(1);
  for (int64_t r = 0; r < B; ++r) {
    const int32_t* ids = b.input_ids.data<int32_t>() + r * S;
    const int32_t* lab = b.labels.data<int32_t>() + r * S;
    rows.push_back({std::vector<int32_t>(ids, ids + S), std::vector<int32_t>(lab, lab + S), {}});
  }
  return rows;
}

// ---- degree P vs degree 1 ---------------------------------------------------------------

struct SpSetting {
  SpMode mode;
  int P;
  int ulysses;  // hybrid only
  SpLayout layout;
  std::string str() const {
    return sp_mode_name(mode) + " P=" + std::to_string(P) +
           (mode == SpMode::kHybrid ? " u=" + std::to_string(ulysses) : std::string()) + " " +
           std::string(sp_layout_name(layout));
  }
};

// Every mode at P in {2, 3, 4, 8} that the heads allow (a Ulysses degree <= H), both layouts
// for the modes with a ring.
std::vector<SpSetting> settings_for(int64_t H) {
  std::vector<SpSetting> out;
  for (int P : {2, 3, 4, 8}) {
    if (P <= H) out.push_back({SpMode::kUlysses, P, 0, SpLayout::kContiguous});
    for (SpLayout l : {SpLayout::kZigzag, SpLayout::kContiguous}) out.push_back({SpMode::kRing, P, 0, l});
  }
  for (auto [P, u] : {std::pair{4, 2}, std::pair{8, 2}, std::pair{8, 4}}) {
    if (u > H) continue;
    for (SpLayout l : {SpLayout::kZigzag, SpLayout::kContiguous}) out.push_back({SpMode::kHybrid, P, u, l});
  }
  return out;
}

TrainConfig options_for(const SpSetting& s) {
  TrainConfig o;
  o.parallel.sp = s.P;
  o.parallel.sp_mode = s.mode;
  o.parallel.ulysses_degree = s.ulysses;
  o.parallel.layout = s.layout;
  // AdamW's first update is g / (|g| + eps) per element: a gradient element at the rounding level
  // of the largest ones (e.g. k_proj, whose per-segment key gradients sum to 0 by the softmax's
  // shift invariance, has some of ~1e-7 of the max) moves by a visible fraction of lr between two
  // correct summation orders (sp = 1 vs sp = P: measured 3e-3 lr on one element of 512). With
  // lr = 1e-3 that stays ~10x inside the 1e-5 bound on the parameter; the gradients, compared
  // before the step, are the strict part of the check.
  o.optimizer.adamw.lr = 1e-3f;
  o.optimizer.adamw.weight_decay = 0.1f;
  o.optimizer.clip = 0.5;  // below the grad norms here: the clip coefficient is exercised
  return o;
}

using Outputs = std::map<std::string, Tensor>;

Outputs as_map(const std::vector<std::pair<std::string, Tensor>>& v) {
  Outputs m;
  for (auto& [name, t] : v) {
    EXPECT_EQ(m.count(name), 0u) << "duplicate output " << name;
    m[name] = t;
  }
  return m;
}

// Same names, and every tensor within tol of the reference.
void expect_same_outputs(const Outputs& got, const Outputs& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": output " << name << " is missing";
    EXPECT_EQ(it->second.shape(), w.shape()) << what << ": " << name;
    EXPECT_LE(rel_error(it->second, w), kTol) << what << ": " << name;
  }
}

// The reference's outputs are what they should be: logits, loss, a grad and a param per
// parameter, grad_norm; and the step moved the weights.
void check_reference(const Outputs& ref, const LlamaConfig& config, const std::string& dir) {
  const auto shapes = LlamaParams::shapes(config);
  EXPECT_EQ(ref.size(), 2 * shapes.size() + 3);
  ASSERT_TRUE(ref.count("loss") && ref.count("grad_norm") && ref.count("logits"));
  const float loss = ref.at("loss").data<float>()[0];
  EXPECT_TRUE(std::isfinite(loss) && loss > 0) << loss;
  EXPECT_GT(ref.at("grad_norm").data<float>()[0], 0.5f) << "the clip (0.5) should be active";
  SafetensorsData initial = read_hf_checkpoint(dir);
  for (auto& [name, shape] : shapes) {
    ASSERT_TRUE(ref.count("grad." + name)) << name;
    ASSERT_TRUE(ref.count("param." + name)) << name;
    EXPECT_GT(rel_error(ref.at("param." + name), initial.at(name)), 1e-4) << name << " did not move";
  }
}

void expect_sp_matches_one(const LlamaConfig& config, const Batch& batch, uint64_t seed) {
  const std::string dir = write_checkpoint(config, seed);
  const SpSetting one{SpMode::kUlysses, 1, 0, SpLayout::kContiguous};
  const Outputs ref = as_map(run_fwdbwd(dir, batch.input_ids, batch.labels, options_for(one), true));
  check_reference(ref, config, dir);
  int runs = 0;
  for (const SpSetting& s : settings_for(config.num_heads)) {
    const std::string what = "H=" + std::to_string(config.num_heads) + " Hkv=" + std::to_string(config.num_kv_heads) +
                             " " + s.str();
    expect_same_outputs(as_map(run_fwdbwd(dir, batch.input_ids, batch.labels, options_for(s), true)), ref, what);
    ++runs;
  }
  EXPECT_GE(runs, 12);
}

TEST(SpModel, MhaEveryModeMatchesDegreeOne) {
  const LlamaConfig c = tiny_config(4, 4, 8, /*tied=*/false);
  expect_sp_matches_one(c, pretrain_batch(2, 13, c.vocab_size, 11), 100);
}

// Hkv = 2: Ulysses P = 4 and hybrid u = 4 replicate each KV head; P = 3 splits 4 query heads
// unevenly (2, 1, 1).
TEST(SpModel, GqaEveryModeMatchesDegreeOne) {
  const LlamaConfig c = tiny_config(4, 2, 8, /*tied=*/true);
  expect_sp_matches_one(c, pretrain_batch(2, 13, c.vocab_size, 12), 200);
}

// Hkv = 1 (multi-query): every Ulysses rank reads the one KV head.
TEST(SpModel, MqaEveryModeMatchesDegreeOne) {
  const LlamaConfig c = tiny_config(4, 1, 8, /*tied=*/false);
  expect_sp_matches_one(c, pretrain_batch(2, 13, c.vocab_size, 13), 300);
}

// H = 6, Hkv = 3 (groups of 2): Ulysses 2 gives each rank 3 query heads, which read KV heads
// (0, 0, 1) and (1, 2, 2): a group cut unevenly, so each query head gets its own KV copy. Ulysses 4
// gives (2, 2, 1, 1) query heads, the last two ranks sharing KV head 2 (replicated).
TEST(SpModel, UnevenHeadSplitMatchesDegreeOne) {
  const LlamaConfig c = tiny_config(6, 3, 4, /*tied=*/false);
  expect_sp_matches_one(c, pretrain_batch(2, 13, c.vocab_size, 14), 400);
}

// SFT: 3/4 of the stream is prompt, so whole shards carry no label (they add 0 / 0 to the loss).
TEST(SpModel, MaskedFirstShardMatchesDegreeOne) {
  const LlamaConfig c = tiny_config(4, 2, 8, /*tied=*/false);
  const Batch b = sft_batch(2, 13, c.vocab_size, 15);
  // The premise: with the contiguous layout the first shard has no good token.
  for (int P : {2, 4, 8}) {
    const SpBatch sb = make_sp_batch(rows_of(b), P, SpLayout::kContiguous);
    EXPECT_EQ(sb.shards[0].good_tokens, 0) << "P=" << P;
    EXPECT_GT(sb.good_tokens, 0);
  }
  expect_sp_matches_one(c, b, 500);
}

// A batch with no label at all: loss 0 and zero gradients on every degree, never NaN.
TEST(SpModel, NoLabelAtAllGivesZeroLossAndGradients) {
  const LlamaConfig c = tiny_config(4, 2, 8, false);
  const std::string dir = write_checkpoint(c, 600);
  Batch b = pretrain_batch(2, 13, c.vocab_size, 16);
  int32_t* lab = b.labels.data<int32_t>();
  for (int64_t i = 0; i < b.labels.numel(); ++i) lab[i] = kIgnoreIndex;
  for (const SpSetting& s : {SpSetting{SpMode::kUlysses, 1, 0, SpLayout::kContiguous},
                             SpSetting{SpMode::kRing, 4, 0, SpLayout::kZigzag},
                             SpSetting{SpMode::kHybrid, 4, 2, SpLayout::kZigzag}}) {
    const Outputs out = as_map(run_fwdbwd(dir, b.input_ids, b.labels, options_for(s), /*optimizer_step=*/false));
    EXPECT_EQ(out.at("loss").data<float>()[0], 0.f) << s.str();
    for (auto& [name, t] : out) {
      if (name.rfind("grad.", 0) != 0) continue;
      for (float x : t.to_f32_vector()) ASSERT_EQ(x, 0.f) << s.str() << ": " << name;
    }
  }
}

TEST(SpModel, ConfigErrorsBeforeAnyWork) {
  const LlamaConfig c = tiny_config(4, 2, 8, false);
  const std::string dir = write_checkpoint(c, 700);
  const Batch b = pretrain_batch(1, 9, c.vocab_size, 17);
  auto expect_error = [&](TrainConfig o, const std::string& fragment) {
    try {
      run_fwdbwd(dir, b.input_ids, b.labels, o, true);
      ADD_FAILURE() << "no InputError; expected one containing: " << fragment;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  TrainConfig o;
  o.parallel.sp = 8;  // Ulysses 8 > 4 query heads
  expect_error(o, "ulysses degree 8 exceeds num_attention_heads=4");
  o.parallel.sp = 6;
  o.parallel.sp_mode = SpMode::kHybrid;
  o.parallel.ulysses_degree = 4;
  expect_error(o, "ulysses_degree=4 must divide sp_size=6");
  o.parallel.ulysses_degree = 0;
  expect_error(o, "ulysses_degree");
  o.parallel.sp = 0;
  o.parallel.sp_mode = SpMode::kRing;
  expect_error(o, "--sp=0");
}

// ---- attention on the data pipeline's shards ---------------------------------------------

// Packed, variable-length rows through make_sp_batch; SP attention on its shards (scattered and
// gathered by global_index) against LocalAttention over the whole padded stream's metadata.
TEST(SpModel, AttentionOnPackedShardsMatchesOneDevice) {
  const std::vector<Sequence> rows = {
      {std::vector<int32_t>(11, 1), std::vector<int32_t>(11, 1), {4, 7}},
      {std::vector<int32_t>(3, 1), std::vector<int32_t>(3, 1), {}},
      {std::vector<int32_t>(9, 1), std::vector<int32_t>(9, 1), {1, 5, 2, 1}},
  };
  const int64_t H = 6, Hkv = 2, D = 4;
  const struct {
    SpMode mode;
    int P, u;
  } modes[] = {{SpMode::kUlysses, 4, 0}, {SpMode::kRing, 3, 0}, {SpMode::kRing, 4, 0}, {SpMode::kHybrid, 8, 2},
               {SpMode::kHybrid, 8, 4}};
  for (const auto& m : modes) {
    for (SpLayout layout : {SpLayout::kContiguous, SpLayout::kZigzag}) {
      const SpBatch sb = make_sp_batch(rows, m.P, layout);
      const int64_t S = sb.padded_len;
      std::vector<std::vector<int32_t>> seg, pos;
      for (const Shard& sh : sb.shards) {
        seg.push_back(sh.seg);
        pos.push_back(sh.pos);
      }
      const std::vector<int32_t> seg_all = sb.gather(seg), pos_all = sb.gather(pos);
      const TokenMeta whole{Tensor::from_vector<int32_t>({S}, seg_all), Tensor::from_vector<int32_t>({S}, pos_all)};
      const std::vector<float> q = testing::random_vector(S * H * D, 1, -2.f, 2.f),
                               k = testing::random_vector(S * Hkv * D, 2, -2.f, 2.f),
                               v = testing::random_vector(S * Hkv * D, 3), dout = testing::random_vector(S * H * D, 4);
      const float scale = 1.f / std::sqrt(static_cast<float>(D));

      // One device.
      LocalAttention local(whole);
      Tensor out = Tensor::empty({S, H, D}, DType::kF32), dq = Tensor::empty({S, H, D}, DType::kF32),
             dk = Tensor::empty({S, Hkv, D}, DType::kF32), dv = Tensor::empty({S, Hkv, D}, DType::kF32);
      auto ctx = local.forward(Tensor::from_vector<float>({S, H, D}, q), Tensor::from_vector<float>({S, Hkv, D}, k),
                               Tensor::from_vector<float>({S, Hkv, D}, v), out, scale);
      local.backward(*ctx, Tensor::from_vector<float>({S, H, D}, dout), dq, dk, dv);

      // P ranks.
      const auto qs = sb.scatter(q, H * D), ks = sb.scatter(k, Hkv * D), vs = sb.scatter(v, Hkv * D),
                 ds = sb.scatter(dout, H * D);
      std::vector<TokenMeta> sp_meta;
      for (const Shard& sh : sb.shards) sp_meta.push_back(shard_token_meta(sh));
      std::vector<Tensor> o_r(m.P), dq_r(m.P), dk_r(m.P), dv_r(m.P);
      const MeshShape shape = sp_mesh_shape(m.mode, m.P, m.u);
      run_local_ranks(m.P, [&](Communicator& world) {
        DeviceMesh mesh(world, shape);
        const int r = mesh.sp_rank();
        const int64_t T = sb.shard_len();
        auto attn = make_sp_attention(mesh, sp_meta, H, Hkv);
        Tensor o = Tensor::empty({T, H, D}, DType::kF32), gq = Tensor::empty({T, H, D}, DType::kF32),
               gk = Tensor::empty({T, Hkv, D}, DType::kF32), gv = Tensor::empty({T, Hkv, D}, DType::kF32);
        auto c = attn->forward(Tensor::from_vector<float>({T, H, D}, qs[r]), Tensor::from_vector<float>({T, Hkv, D}, ks[r]),
                               Tensor::from_vector<float>({T, Hkv, D}, vs[r]), o, scale);
        attn->backward(*c, Tensor::from_vector<float>({T, H, D}, ds[r]), gq, gk, gv);
        o_r[r] = o;
        dq_r[r] = gq;
        dk_r[r] = gk;
        dv_r[r] = gv;
      });
      const std::string what = sp_mode_name(m.mode) + " P=" + std::to_string(m.P) + " u=" + std::to_string(m.u) +
                               " " + std::string(sp_layout_name(layout));
      EXPECT_LE(rel_error(sb.gather(o_r), out), kTol) << what << ": out";
      EXPECT_LE(rel_error(sb.gather(dq_r), dq), kTol) << what << ": dq";
      EXPECT_LE(rel_error(sb.gather(dk_r), dk), kTol) << what << ": dk";
      EXPECT_LE(rel_error(sb.gather(dv_r), dv), kTol) << what << ": dv";
    }
  }
}

// attention_work is the work the ring does: for each rank, the (query, key) pairs that the mask
// metadata lets through, summed over the ring's blocks, on packed rows with pads. Zigzag
// balances it on one long sequence; contiguous does not.
TEST(SpModel, AttentionWorkIsWhatTheRingMasksLetThrough) {
  auto visible_pairs = [](const Shard& qs, const Shard& ks) {
    int64_t n = 0;
    for (int64_t i = 0; i < qs.size(); ++i)
      for (int64_t j = 0; j < ks.size(); ++j) n += qs.seg[i] == ks.seg[j] && ks.pos[j] <= qs.pos[i];
    return n;
  };
  const std::vector<Sequence> packed = {{std::vector<int32_t>(19, 1), std::vector<int32_t>(19, 1), {6, 13}},
                                        {std::vector<int32_t>(8, 1), std::vector<int32_t>(8, 1), {}}};
  for (int P : {2, 3, 4}) {
    for (SpLayout layout : {SpLayout::kContiguous, SpLayout::kZigzag}) {
      const SpBatch sb = make_sp_batch(packed, P, layout);
      for (int r = 0; r < P; ++r) {
        int64_t ring = 0;
        for (int b = 0; b < P; ++b) ring += visible_pairs(sb.shards[r], sb.shards[b]);
        EXPECT_EQ(ring, attention_work(sb, r)) << "P=" << P << " rank " << r;
      }
    }
    const std::vector<Sequence> one = {{std::vector<int32_t>(16 * P, 1), std::vector<int32_t>(16 * P, 1), {}}};
    const SpBatch zig = make_sp_batch(one, P, SpLayout::kZigzag), con = make_sp_batch(one, P, SpLayout::kContiguous);
    for (int r = 1; r < P; ++r) {
      EXPECT_EQ(attention_work(zig, r), attention_work(zig, 0)) << "zigzag P=" << P;
      EXPECT_GT(attention_work(con, r), attention_work(con, r - 1)) << "contiguous P=" << P;
    }
  }
}

}  // namespace
}  // namespace seqpar

namespace seqpar {
namespace {

// Peak host bytes of one rank's forward + backward over one causal sequence of T tokens, for a
// model of `config` set up by `setup` (the memory levers).
size_t step_peak_bytes(const LlamaConfig& config, int64_t T, const std::function<void(LlamaModel&)>& setup) {
  LlamaModel model(config);
  init_llama_params(model.params(), config, 5, 0.02f);
  std::vector<int32_t> ids(T), pos(T);
  for (int64_t t = 0; t < T; ++t) {
    ids[t] = static_cast<int32_t>((t * 7) % config.vocab_size);
    pos[t] = static_cast<int32_t>(t);
  }
  setup(model);
  LocalAttention attn(token_meta_from_cu_seqlens({0, static_cast<int32_t>(T)}));
  cpu_allocator().reset_peak();
  const size_t before = cpu_allocator().current_bytes();
  model.forward({Tensor::from_vector<int32_t>({T}, ids), Tensor::from_vector<int32_t>({T}, pos),
                 Tensor::from_vector<int32_t>({T}, ids)},
                attn);
  model.backward(1.f / static_cast<float>(T));
  return cpu_allocator().peak_bytes() - before;
}

// One rank and every SP mode (Ulysses, ring zigzag, hybrid), for checks of a memory lever.
const SpSetting kEverySpMode[] = {SpSetting{SpMode::kUlysses, 1, 0, SpLayout::kContiguous},
                                  SpSetting{SpMode::kUlysses, 2, 0, SpLayout::kContiguous},
                                  SpSetting{SpMode::kRing, 2, 0, SpLayout::kZigzag},
                                  SpSetting{SpMode::kHybrid, 4, 2, SpLayout::kZigzag}};

// Every output of `b` equals `a`'s bit for bit.
void expect_bitwise_same(const Outputs& a, const Outputs& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << what << ": " << name;
    EXPECT_EQ(std::memcmp(t.raw(), b.at(name).raw(), t.nbytes()), 0) << what << ": " << name;
  }
}

// Activation checkpointing recomputes each layer in backward: the same outputs bit for bit (the
// CPU is deterministic), on one rank and with every SP mode (the recompute repeats attention's
// communication), and less peak memory.
TEST(SpModel, ActivationCheckpointingChangesNothingButMemory) {
  LlamaConfig config = tiny_config(4, 2, 8, false);
  config.num_layers = 4;
  const std::string dir = write_checkpoint(config, 41);
  const Batch batch = pretrain_batch(2, 96, config.vocab_size, 42);
  for (const SpSetting& s : kEverySpMode) {
    const Outputs a = as_map(run_fwdbwd(dir, batch.input_ids, batch.labels, options_for(s), true));
    for (bool keep_attention : {false, true}) {
      TrainConfig ckpt = options_for(s);
      ckpt.memory.activation_checkpointing = true;
      ckpt.memory.checkpoint_keep_attention = keep_attention;
      expect_bitwise_same(a, as_map(run_fwdbwd(dir, batch.input_ids, batch.labels, ckpt, true)),
                          s.str() + (keep_attention ? " keeping attention" : ""));
    }
  }
  auto peak = [&](LlamaModel::ActivationPolicy policy) {
    return step_peak_bytes(config, 2048, [&](LlamaModel& m) { m.set_activation_policy(policy); });
  };
  const size_t keep_peak = peak(LlamaModel::ActivationPolicy::kKeep);
  const size_t ckpt_peak = peak(LlamaModel::ActivationPolicy::kCheckpoint);
  const size_t attn_peak = peak(LlamaModel::ActivationPolicy::kCheckpointKeepAttention);
  EXPECT_LT(ckpt_peak, keep_peak * 6 / 10) << "keep " << keep_peak << " B, checkpoint " << ckpt_peak << " B";
  // Keeping attention's q, k, v, out and LSE costs more than the input alone, less than everything.
  EXPECT_GT(attn_peak, ckpt_peak) << "checkpoint " << ckpt_peak << " B, keeping attention " << attn_peak << " B";
  EXPECT_LT(attn_peak, keep_peak * 8 / 10) << "keep " << keep_peak << " B, keeping attention " << attn_peak << " B";
  // Keeping attention needs checkpointing: a clear error otherwise, before any work.
  TrainConfig bad = options_for(SpSetting{SpMode::kUlysses, 1, 0, SpLayout::kContiguous});
  bad.memory.checkpoint_keep_attention = true;
  EXPECT_THROW(run_fwdbwd(dir, batch.input_ids, batch.labels, bad, true), InputError);
}

// Where each layer's kept input waits (g GPU, h host, r recomputed from the input below or the
// embedding) changes no output bit (the CPU recompute is deterministic), with every SP mode (a
// recomputed layer repeats its attention's communication; ZeRO-3's out-of-order layer fetches:
// Trainer.ActivationCheckpointingTrainsIdentically); and each placement lowers the peak as planned:
// an 'r' layer and an 'h' layer hold no input between forward and backward.
TEST(SpModel, LayerInputPlacementChangesNothingButMemory) {
  LlamaConfig config = tiny_config(4, 2, 8, false);
  config.num_layers = 4;
  const std::string dir = write_checkpoint(config, 43);
  const Batch batch = pretrain_batch(2, 96, config.vocab_size, 44);
  for (const SpSetting& s : kEverySpMode) {
    const Outputs a = as_map(run_fwdbwd(dir, batch.input_ids, batch.labels, options_for(s), true));
    for (const char* placement : {"rgrg", "hrrg", "4r", "grrh", "2h2r", "rhgr"}) {
      TrainConfig o = options_for(s);
      o.memory.activation_checkpointing = true;
      o.memory.checkpoint_placement = placement;
      expect_bitwise_same(a, as_map(run_fwdbwd(dir, batch.input_ids, batch.labels, o, true)),
                          s.str() + " placement " + placement);
    }
  }
  auto peak = [&](const std::string& places) {
    return step_peak_bytes(config, 2048, [&](LlamaModel& m) {
      m.set_activation_policy(LlamaModel::ActivationPolicy::kCheckpoint);
      std::vector<InputPlace> v;
      for (char ch : places) v.push_back(ch == 'g' ? InputPlace::kDevice : ch == 'h' ? InputPlace::kHost : InputPlace::kRecompute);
      m.set_input_placement(v);
    });
  };
  const int64_t input = 2048 * config.hidden_size * 4;  // one layer's input, f32
  const size_t all_g = peak("gggg"), rgrg = peak("rgrg"), hhhh = peak("hhhh");
  EXPECT_LE(rgrg + input, all_g) << "gggg " << all_g << " B, rgrg " << rgrg << " B";
  EXPECT_LE(hhhh + 2 * input, all_g) << "gggg " << all_g << " B, hhhh " << hhhh << " B";
  // A layer keeping its attention is not run forward again: r with it is refused by name.
  TrainConfig bad = options_for(SpSetting{SpMode::kUlysses, 1, 0, SpLayout::kContiguous});
  bad.memory.activation_checkpointing = true;
  bad.memory.checkpoint_keep_attention = true;
  bad.memory.checkpoint_placement = "rgrg";
  EXPECT_THROW(run_fwdbwd(dir, batch.input_ids, batch.labels, bad, true), InputError);
  bad.memory.checkpoint_keep_attention = false;
  bad.memory.checkpoint_placement = "rgr";  // 3 of 4 layers
  EXPECT_THROW(run_fwdbwd(dir, batch.input_ids, batch.labels, bad, true), InputError);
}

}  // namespace
}  // namespace seqpar

namespace seqpar {
namespace {

// Tiled MLP: the same outputs as one tile within f32 summation order (the weight gradients sum
// over tiles), for tiles that do and do not divide the shard, with SP and with activation
// checkpointing on top; and the [T, F] tensors no longer set the peak.
TEST(SpModel, TiledMlpMatchesUntiled) {
  LlamaConfig config = tiny_config(4, 2, 8, false);
  config.intermediate_size = 256;  // MLP-heavy, so the tiles show in the peak
  const std::string dir = write_checkpoint(config, 51);
  const Batch batch = sft_batch(2, 96, config.vocab_size, 52);
  for (const SpSetting& s : {SpSetting{SpMode::kUlysses, 1, 0, SpLayout::kContiguous},
                             SpSetting{SpMode::kRing, 2, 0, SpLayout::kZigzag},
                             SpSetting{SpMode::kHybrid, 4, 2, SpLayout::kZigzag}}) {
    const Outputs ref = as_map(run_fwdbwd(dir, batch.input_ids, batch.labels, options_for(s), true));
    for (int64_t tile : {16, 37}) {
      for (int ckpt : {0, 1, 2}) {  // none, checkpointing, checkpointing keeping attention
        TrainConfig o = options_for(s);
        o.memory.mlp_tile_tokens = tile;
        o.memory.activation_checkpointing = ckpt > 0;
        o.memory.checkpoint_keep_attention = ckpt == 2;
        expect_same_outputs(as_map(run_fwdbwd(dir, batch.input_ids, batch.labels, o, true)), ref,
                            s.str() + " tile " + std::to_string(tile) +
                                (ckpt == 1 ? " + checkpointing" : ckpt == 2 ? " + checkpointing keeping attention" : ""));
      }
    }
  }
  auto peak = [&](int64_t tile) {
    return step_peak_bytes(config, 2048, [&](LlamaModel& m) {
      m.set_activation_policy(LlamaModel::ActivationPolicy::kCheckpoint);
      m.set_mlp_tile_tokens(tile);
    });
  };
  const size_t whole = peak(0), tiled = peak(256);
  EXPECT_LT(tiled, whole * 7 / 10) << "untiled " << whole << " B, tiled " << tiled << " B";
}

}  // namespace
}  // namespace seqpar

namespace seqpar {
namespace {

// Tiled loss: the loss and every gradient as with whole logits (f32 summation order), no
// [T, V] tensor in the peak; a forward asked for its logits still returns them whole.
TEST(SpModel, TiledLossMatchesWholeLogits) {
  LlamaConfig config = tiny_config(4, 2, 8, true);  // tied: the head's gradient lands in embed_tokens
  config.vocab_size = 512;                           // vocabulary-heavy, so the logits set the peak
  const int64_t T = 1024;
  std::vector<int32_t> ids(T), pos(T), targets(T);
  for (int64_t t = 0; t < T; ++t) {
    ids[t] = static_cast<int32_t>((t * 13) % config.vocab_size);
    pos[t] = static_cast<int32_t>(t);
    targets[t] = t % 5 == 0 ? kIgnoreIndex : static_cast<int32_t>((t * 7 + 3) % config.vocab_size);
  }
  struct Run {
    LossStats stats;
    std::vector<std::pair<std::string, Tensor>> grads;
    size_t peak;
  };
  auto run = [&](int64_t tile, Tensor* logits) {
    LlamaModel model(config);
    init_llama_params(model.params(), config, 9, 0.02f);
    model.set_loss_tile_tokens(tile);
    LocalAttention attn(token_meta_from_cu_seqlens({0, static_cast<int32_t>(T)}));
    cpu_allocator().reset_peak();
    const size_t before = cpu_allocator().current_bytes();
    Run r;
    r.stats = model.forward({Tensor::from_vector<int32_t>({T}, ids), Tensor::from_vector<int32_t>({T}, pos),
                             Tensor::from_vector<int32_t>({T}, targets)},
                            attn, logits);
    model.backward(1.f / static_cast<float>(r.stats.good_tokens));
    r.peak = cpu_allocator().peak_bytes() - before;
    for (auto& [name, g] : model.grads().named()) r.grads.emplace_back(name, g->clone());
    return r;
  };
  const Run whole = run(0, nullptr);
  for (int64_t tile : {128, 100}) {
    const Run tiled = run(tile, nullptr);
    EXPECT_EQ(tiled.stats.good_tokens, whole.stats.good_tokens);
    EXPECT_NEAR(tiled.stats.loss_sum, whole.stats.loss_sum, 1e-5 * whole.stats.loss_sum) << "tile " << tile;
    for (size_t i = 0; i < whole.grads.size(); ++i)
      EXPECT_LE(rel_error(tiled.grads[i].second, whole.grads[i].second), kTol) << "tile " << tile << " "
                                                                                << whole.grads[i].first;
    // (The whole logits' gradient is written over them, so whole holds one [T, V] at its peak.)
    EXPECT_LT(tiled.peak, whole.peak * 3 / 4) << "whole " << whole.peak << " B, tiled " << tiled.peak << " B";
  }
  Tensor logits;
  const Run asked = run(128, &logits);  // logits wanted: computed whole
  EXPECT_EQ(logits.shape(), (Shape{T, config.vocab_size}));
  EXPECT_EQ(asked.stats.loss_sum, whole.stats.loss_sum);
}

// A training forward given LossBackward runs a tiled loss's backward itself (no second LM head pass
// in backward): over two micro-batches (gradients accumulating), tied and untied heads, every
// gradient bitwise what the backward's own tiles give, the hook called once per forward before the
// first gradient is written, no [T, V] in the peak; a backward given another dloss is refused.
TEST(SpModel, LossBackwardInTheForwardIsBitwiseTheSame) {
  for (bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    LlamaConfig config = tiny_config(4, 2, 8, tied);
    config.vocab_size = 512;
    const int64_t T = 600;
    auto batch = [&](int seed) {
      std::vector<int32_t> ids(T), pos(T), targets(T);
      for (int64_t t = 0; t < T; ++t) {
        ids[t] = static_cast<int32_t>((t * 13 + seed) % config.vocab_size);
        pos[t] = static_cast<int32_t>(t);
        targets[t] = (t + seed) % 7 == 0 ? kIgnoreIndex : static_cast<int32_t>((t * 7 + seed) % config.vocab_size);
      }
      return LlamaBatch{Tensor::from_vector<int32_t>({T}, ids), Tensor::from_vector<int32_t>({T}, pos),
                        Tensor::from_vector<int32_t>({T}, targets)};
    };
    const float dloss = 1.f / 1000.f;
    struct Run {
      std::vector<double> losses;
      std::vector<std::pair<std::string, Tensor>> grads;
      int hook_calls = 0;
    };
    auto run = [&](bool fused) {
      LlamaModel model(config);
      init_llama_params(model.params(), config, 9, 0.02f);
      model.set_loss_tile_tokens(128);
      EXPECT_TRUE(model.fuses_loss_backward(T));
      EXPECT_FALSE(model.fuses_loss_backward(128));
      // Gradients left from an earlier step: the hook zeroes them, as the trainer does.
      for (auto& [name, g] : model.grads().named()) {
        std::vector<float> halves(static_cast<size_t>(g->numel()), 0.5f);
        g->copy_from(Tensor::from_vector<float>(g->shape(), halves));
      }
      Run r;
      for (int m = 0; m < 2; ++m) {
        LocalAttention attn(token_meta_from_cu_seqlens({0, static_cast<int32_t>(T)}));
        LlamaModel::LossBackward lb{dloss, [&] {
                                      ++r.hook_calls;
                                      if (m == 0) model.zero_grads();
                                    }};
        if (!fused && m == 0) model.zero_grads();
        r.losses.push_back(model.forward(batch(m), attn, nullptr, fused ? &lb : nullptr).loss_sum);
        model.backward(dloss);
      }
      for (auto& [name, g] : model.grads().named()) r.grads.emplace_back(name, g->clone());
      return r;
    };
    const Run plain = run(false), fused = run(true);
    EXPECT_EQ(plain.hook_calls, 0);
    EXPECT_EQ(fused.hook_calls, 2);
    EXPECT_EQ(fused.losses, plain.losses);
    ASSERT_EQ(fused.grads.size(), plain.grads.size());
    for (size_t i = 0; i < plain.grads.size(); ++i)
      EXPECT_EQ(rel_error(fused.grads[i].second, plain.grads[i].second), 0.0) << plain.grads[i].first;
  }
  // backward must be given the dloss the forward used.
  LlamaConfig config = tiny_config(4, 2, 8, true);
  LlamaModel model(config);
  init_llama_params(model.params(), config, 9, 0.02f);
  model.set_loss_tile_tokens(16);
  const int64_t T = 64;
  std::vector<int32_t> ids(T, 3), pos(T), targets(T, 5);
  for (int64_t t = 0; t < T; ++t) pos[t] = static_cast<int32_t>(t);
  LocalAttention attn(token_meta_from_cu_seqlens({0, static_cast<int32_t>(T)}));
  const LlamaModel::LossBackward lb{0.25f, {}};
  model.forward({Tensor::from_vector<int32_t>({T}, ids), Tensor::from_vector<int32_t>({T}, pos),
                 Tensor::from_vector<int32_t>({T}, targets)},
                attn, nullptr, &lb);
  EXPECT_THROW(model.backward(0.5f), std::exception);
}

}  // namespace
}  // namespace seqpar

namespace seqpar {
namespace {

// dynamic / longrope RoPE take their frequencies from the batch's rope_len, per forward and
// stateless (docs/models.md, "RoPE"): the same batch gives the same loss and gradients whatever ran
// before it, unlike transformers' growing cache; a length at or below the threshold is the config's.
TEST(SpModel, LengthDependentRopeIsPerBatchAndStateless) {
  for (const char* type : {"dynamic", "longrope"}) {
    SCOPED_TRACE(type);
    LlamaConfig config = tiny_config(4, 2, 8, false);
    config.max_position_embeddings = 8;
    config.rope.type = type;
    config.rope.factor = 2.0;
    config.rope.original_max_position_embeddings = 8;
    config.rope.short_factor = {1.0, 1.1, 1.2, 1.3};
    config.rope.long_factor = {1.0, 2.0, 4.0, 8.0};
    const int64_t T = 16;
    LlamaModel model(config);
    init_llama_params(model.params(), config, 7, 0.05f);
    std::vector<int32_t> ids(T), pos(T);
    for (int64_t t = 0; t < T; ++t) {
      ids[t] = static_cast<int32_t>((t * 11) % config.vocab_size);
      pos[t] = static_cast<int32_t>(t);
    }
    LocalAttention attn(token_meta_from_cu_seqlens({0, static_cast<int32_t>(T)}));
    auto run = [&](int64_t rope_len) {
      model.zero_grads();
      const LossStats s = model.forward({Tensor::from_vector<int32_t>({T}, ids), Tensor::from_vector<int32_t>({T}, pos),
                                         Tensor::from_vector<int32_t>({T}, ids), rope_len},
                                        attn);
      model.backward(1.f / static_cast<float>(T));
      const Tensor& g = model.grads().embed_tokens;  // f32, host
      return std::make_pair(s.loss_sum, std::vector<float>(g.data<float>(), g.data<float>() + g.numel()));
    };
    const auto at_init = run(0);
    EXPECT_EQ(run(8), at_init) << "rope_len <= the threshold: the config's frequencies";
    const auto long16 = run(16);
    EXPECT_NE(long16.first, at_init.first);
    run(64);
    EXPECT_EQ(run(16), long16) << "a longer batch before changes nothing";
    run(0);
    EXPECT_EQ(run(16), long16);
  }
}

}  // namespace
}  // namespace seqpar
