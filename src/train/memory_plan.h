// `seqpar plan`: the per-GPU memory of a training step, predicted from the shapes the model, the
// attention, the optimizer and the memory levers allocate (the same tensors the device allocator
// counts), before any GPU work. The target: prediction and allocator agree within 10%; the
// CPU tests check that against the CPU allocator, bench/NOTES.md against the H200's.
//
// The model: resident state (weights, f32 gradients, AdamW moments and master weights, ZeRO
// shards) plus the largest of the step's phases over what forward keeps of every layer:
//   - loss:      the LM head's logits, their gradient written over them ([tokens, vocab] or one tile);
//   - layer:     the top layer's backward (a checkpointed layer recomputed first), its largest
//                transient (the MLP's or attention's gradients and the attention backend's
//                workspace), the residual-stream gradients;
//   - optimizer: ZeRO's all-gather of the updated weights (activations are gone by then).
// With sequence parallelism, the attention's buffers (all-to-all and ring send / receive buffers,
// the communicator's copies of what is in flight, Ulysses' head groups overlapping, the ring's
// accumulators) are walked call by call and added where they are alive: the top layer's attention
// forward (in forward, and in a checkpointed layer's recompute) and its backward.
// Where each checkpointed layer's input waits (checkpoint_placement, checkpoint offload = every layer
// in host memory): the plan walks the model's forward and backward per layer, counting the inputs on
// the GPU in each phase (those kept there, copies to the host still in flight on CUDA, the one
// prefetched, the inputs a run of recomputed layers holds), adds the recompute of such a run as a
// phase, and the host-placed inputs to host_offload_bytes.
// Host memory is planned beside it (host, host_bytes): the host AdamW state and its pinned staging
// (optimizer offload), the host weights (parameter offload), the checkpoint offload's layer inputs;
// `longest_fitting_seq_len` respects both limits, and `choose_levers` picks the offload levers.
// Not modelled: allocator rounding and fragmentation, NCCL's own buffers, the model's
// construction (its whole weights and gradients exist once before ZeRO-3 / ZeRO-2 drop them).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "arch/llama_config.h"
#include "train/memory_settings.h"

namespace seqpar {

struct MemoryPlanInput {
  LlamaConfig model;
  int64_t seq_len = 0;          // tokens per sequence
  int micro_batch = 1;          // sequences per step per data-parallel rank
  int sp = 1;                   // sequence-parallel degree (the sequence's tokens split over sp ranks)
  int ulysses_degree = 1;       // ranks of a Ulysses group (sp for ulysses, 1 for ring, U for hybrid)
  int world = 1;                // all ranks (sp × data parallel): the ZeRO shard count
  int ulysses_head_groups = 0;  // Ulysses head groups (parallel/sp_attention.h); 0: kDefaultUlyssesHeadGroups
  bool cuda = true;             // bf16 weights and activations, f32 master weights (CPU: all f32)
  bool fp16 = false;            // CUDA's 16-bit type is fp16 (mixed_precision fp16): the same bytes, named so
  // CUDA, one rank's attention: cuDNN's fused SDPA (attn_implementation sdpa, where it is exact) with
  // its backward's plan workspace and f32 dq accumulator, or seqpar's flash kernels (flash_attention_2
  // / _3) with their f32 dq accumulator only.
  bool cudnn_attention = true;
  // The GPU's compute capability (core/device.h), which auto's attention rule depends on: the trainer's is its
  // device's; `seqpar plan` plans for a Hopper (90), the card its figures were measured on.
  int compute_capability = 90;
  MemorySettings memory;        // the run's memory levers, as the trainer applies them
};

struct MemoryPlan {
  int64_t tokens_per_rank = 0;
  // Resident for the whole step: name, bytes.
  std::vector<std::pair<std::string, int64_t>> resident;
  // Each phase's bytes on top of the resident state, and which one is the peak.
  std::vector<std::pair<std::string, int64_t>> phases;
  std::string peak_phase;
  int64_t resident_bytes = 0;
  int64_t peak_bytes = 0;
  // Bytes per token and layer that forward keeps for backward.
  int64_t kept_per_token_layer = 0;
  int64_t full_layers = 0;                // layers not checkpointed ('f' in the placement)
  int64_t full_per_token_layer = 0;       // what each of them keeps per token (everything)
  // Sequence parallelism: the largest of one attention call's communication buffers (in the phases).
  int64_t sp_buffers = 0;
  // Checkpoint offload: host memory (pinned on CUDA) holding the layers' inputs, not in peak_bytes.
  int64_t host_offload_bytes = 0;
  // Where each layer's kept input waits (checkpoint_placement's short form, e.g. "32g", "8h24g").
  std::string input_places;
  // Host memory of one rank for the whole run: name, bytes (pinned or not, as the name says); their
  // sum, and the pinned part.
  std::vector<std::pair<std::string, int64_t>> host;
  int64_t host_bytes = 0;
  int64_t host_pinned_bytes = 0;
  // Host memory of the whole process while its ranks start (not per rank): the copy (bf16 on CUDA, f32 on the CPU) of the
  // initial weights every rank copies from (train/trainer.cpp; freed once they have), beside the
  // ranks' host memory as they allocate it. A resume also holds the checkpoint's files: not counted.
  int64_t host_setup_bytes = 0;
  // The process's own host memory on CUDA, not per rank: the CUDA runtime, cuBLAS, cuDNN and NCCL
  // and the binary (resident beside the planned buffers: 0.65-0.75 GiB on the H200 machine,
  // bench/NOTES.md 2026-12-04; the plan counts 0.7 GiB). check_host_memory counts it once.
  int64_t host_process_bytes = 0;
  // One rank's host memory with the process's while the ranks start: the figure the plan prints and
  // judges (`seqpar train` checks ranks × host_bytes + the rest, check_host_memory).
  int64_t host_start_bytes() const { return host_bytes + host_setup_bytes + host_process_bytes; }
};

// The machine's MemAvailable from /proc/meminfo (bytes; 0 when it cannot be read), and MemTotal.
int64_t host_memory_available_bytes();
int64_t host_memory_total_bytes();
// The host memory a run may use: host_memory_gib when > 0, else MemAvailable.
int64_t host_memory_capacity(double host_memory_gib);
// InputError when `ranks` ranks of this process need more host memory than host_memory_capacity
// (naming the setting, the bytes and what takes them); before any allocation.
void check_host_memory(const MemoryPlan& plan, int ranks, double host_memory_gib);

// Throws InputError for a configuration the trainer would refuse (tokens not divisible, ...).
MemoryPlan plan_memory(const MemoryPlanInput& in);

// The longest sequence (a multiple of `granularity` tokens) whose plan fits in capacity_bytes of GPU
// memory and host_capacity_bytes of host memory (<= 0: unlimited; the host bytes with the setup's
// initial-weights copy, as check_host_memory counts them), with everything else as in `in`; 0 when
// not even `granularity` tokens fit.
int64_t longest_fitting_seq_len(MemoryPlanInput in, int64_t capacity_bytes, int64_t granularity = 1024,
                                int64_t host_capacity_bytes = 0);

// checkpoint_placement=auto: where each layer's input waits for `in` (its seq_len) so that the plan fits
// in capacity_bytes of GPU memory and host_capacity_bytes of host memory (as longest_fitting_seq_len
// counts them): the fewest recomputed layers, then the fewest in host memory; when every input fits
// on the GPU, the most top layers not checkpointed ('f') whose plan stays within kFullLayerShare of
// capacity_bytes (the rest 'g'). The expanded form (one of g, h, r, f per layer). "" when nothing
// fits, and without checkpointing (it does not apply). longest_fitting_seq_len with "auto" asks it
// at every length.
// Layers not checkpointed buy time with memory; the plan has matched the measured peaks, but auto
// leaves this share of the capacity unused beside them, so that a misjudged byte costs a recompute
// rather than an out-of-memory.
inline constexpr double kFullLayerShare = 0.95;
std::string choose_checkpoint_placement(const MemoryPlanInput& in, int64_t capacity_bytes,
                                        int64_t host_capacity_bytes);
// The GPU memory a run's checkpoint_placement=auto plans for: the device's total less 2% (the CUDA
// context, the libraries' own allocations and the allocator's rounding are outside the plan).
inline int64_t auto_placement_capacity(int64_t device_total_bytes) {
  return device_total_bytes - device_total_bytes / 50;
}

// InputError when `ranks` ranks of `plan` (ranks sharing one device) exceed capacity_bytes of
// `where` (a device name); nothing when capacity_bytes <= 0 (unknown). The trainer calls it before
// any rank allocates: a run the plan says cannot fit does not start.
// `hint`, called only for a run that does not fit (what makes it fit: describe_levers_to_fit), ends the
// message when given.
void check_plan_fits(const MemoryPlan& plan, int ranks, int64_t capacity_bytes, const std::string& where,
                     const std::function<std::string()>& hint = {});

// The host's physical memory in bytes (0 when unknown): the capacity of CPU runs.
int64_t host_memory_bytes();

// --longest choosing the offload levers too: the memory settings of `in` with optimizer offload,
// ZeRO-3 and parameter offload (and checkpoint offload, with checkpointing) tried in order of cost,
// the one with the longest fitting sequence kept (the cheaper on a tie).
struct LeverChoice {
  MemorySettings memory;
  int64_t seq_len = 0;
  std::string levers;  // what was added to the given settings, for people ("" : nothing)
  // When nothing fits: the first lever set that would fit the GPU but not the host's memory (levers_to_fit), with
  // its host peak per rank and the host limit; empty when none would.
  std::string host_short;
};
LeverChoice choose_levers(const MemoryPlanInput& in, int64_t capacity_bytes, int64_t granularity,
                          int64_t host_capacity_bytes);
// A run too large as given, at its own seq_len: the cheapest lever set of choose_levers' order that
// fits both limits, on the run's own checkpointing (checkpoint_placement=auto chosen as the trainer
// would), then, for a run without checkpointing, with it (keeping attention, then not); `levers`
// names what to add with the flags of `seqpar train` ("nothing added" when the run fits as given).
// seq_len 0 and `levers` empty when nothing fits: more GPUs are needed.
LeverChoice levers_to_fit(const MemoryPlanInput& in, int64_t capacity_bytes, int64_t host_capacity_bytes);
// For people: "it fits with LEVERS (peak X GiB, host Y GiB)", or that no lever does (more GPUs).
std::string describe_levers_to_fit(const MemoryPlanInput& in, const LeverChoice& choice);

// A table for people: the components, the phases, the peak, the host memory; `capacity_bytes` > 0
// adds whether the peak fits, `host_capacity_bytes` > 0 whether the host memory does.
std::string format_memory_plan(const MemoryPlanInput& in, const MemoryPlan& plan, int64_t capacity_bytes,
                               int64_t host_capacity_bytes = 0);

}  // namespace seqpar
