#!/bin/bash
# seqpar's equivalent of Megatron-DeepSpeed's
#   examples_deepspeed/sequence_parallel/ds_pretrain_gpt_30B_seq_parallel_32k.sh
# GPT-3 30B (64 layers, hidden 6144, 64 heads: head_dim 96, FFN 24576) on 32K-token sequences,
# DeepSpeed-Ulysses over 4 GPUs, ZeRO 3, global batch 2, micro batch 1; the flags and what each
# became are in pretrain_gpt_seq_parallel.sh. `seqpar plan --preset gpt-30b-32k --gpus N` says
# whether it fits first. Every value is an environment variable; on the CPU at a tiny size:
#
#   SEQPAR=build/seqpar DEVICE=cpu PRESET=tiny SEQ_LEN=128 NUM_LAYERS=2 HIDDEN_SIZE=96 NUM_ATTN_HEADS=4 \
#     SP_SIZE=2 TRAIN_TOKENS=1024 LR_WARMUP_TOKENS=256 OUTPUT=/tmp/out \
#     examples/megatron-deepspeed/pretrain_gpt_30B_seq_parallel_32k.sh
## GPT-3 30B (their script's model block)
export MODEL_SIZE=30
export PRESET=${PRESET:-gpt-30b-32k}
export NUM_LAYERS=${NUM_LAYERS:-64}
export HIDDEN_SIZE=${HIDDEN_SIZE:-6144}
export NUM_ATTN_HEADS=${NUM_ATTN_HEADS:-64}
export GLOBAL_BATCH=${GLOBAL_BATCH:-2}
export LR=${LR:-1.0e-4}
export MIN_LR=${MIN_LR:-1.0e-6}
export INIT_STD=${INIT_STD:-0.008}
## ZeRO-based data parallelism
export ZERO_STAGE=${ZERO_STAGE:-3}
exec "$(dirname "$0")/pretrain_gpt_seq_parallel.sh" "$@"
