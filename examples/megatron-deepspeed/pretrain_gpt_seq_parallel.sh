#!/bin/bash
# The body of seqpar's equivalents of Megatron-DeepSpeed's
#   examples_deepspeed/sequence_parallel/ds_pretrain_gpt_1.3B_seq_parallel_32k.sh and ..._30B_...
# (deepspeedai/Megatron-DeepSpeed). Their two scripts differ only in the model block, the global
# batch and the ZeRO stage; so do ours: pretrain_gpt_1.3B_seq_parallel_32k.sh and
# pretrain_gpt_30B_seq_parallel_32k.sh set those and run this. Each flag below is the one their
# script passes, with what it became in seqpar; docs/coming-from-megatron-deepspeed.md has the
# whole table. Every size is an environment variable, so CI runs both on the CPU at a tiny size.
set -euo pipefail
SEQPAR=${SEQPAR:-seqpar}

## Model (set by the wrapper): a gpt-*-32k preset is one of the script's GPT-3 sizes (learned
## positions to 32768, LayerNorm, GeLU, biases, tied embeddings, vocab 50257 padded to 50304),
## randomly initialised; the shape flags restate (or, from the environment, override) its sizes.
: "${PRESET:?the wrapper sets PRESET}" "${NUM_LAYERS:?}" "${HIDDEN_SIZE:?}" "${NUM_ATTN_HEADS:?}" "${INIT_STD:?}"
: "${LR:?}" "${GLOBAL_BATCH:?}" "${ZERO_STAGE:?}" "${MODEL_SIZE:?}"
SEQ_LEN=${SEQ_LEN:-32768}
FFN_HIDDEN_SIZE=${FFN_HIDDEN_SIZE:-$((4 * HIDDEN_SIZE))}

## Batch, length and learning rate, as theirs.
MICRO_BATCH=${MICRO_BATCH:-1}
MIN_LR=${MIN_LR:-1.0e-6}
TRAIN_TOKENS=${TRAIN_TOKENS:-300000000000}          # 300B
LR_WARMUP_TOKENS=${LR_WARMUP_TOKENS:-3000000000}    # 3000M

## Parallelism: sequence parallel 4 (Ulysses), ZeRO (the wrapper's stage), no tensor or pipeline
## parallelism.
SP_SIZE=${SP_SIZE:-4}
DEVICE=${DEVICE:-cuda}
# One process per GPU over NCCL (world = NUM_GPUS; dp = world / sp). On the CPU the ranks are threads
# of one process, so the launcher starts one.
NUM_GPUS=${NUM_GPUS:-$SP_SIZE}
if [ "$DEVICE" = cpu ]; then NUM_GPUS=1; fi

## Output and data.
LOG_INTERVAL=${LOG_INTERVAL:-10}
EVAL_INTERVAL=${EVAL_INTERVAL:-100}
EVAL_ITERS=${EVAL_ITERS:-10}
SAVE_INTERVAL=${SAVE_INTERVAL:-100}
OUTPUT=${OUTPUT:-output}
SAVE_DIR=${SAVE_DIR:-$OUTPUT/checkpoint/gpt_${MODEL_SIZE}B_sp${SP_SIZE}_z${ZERO_STAGE}}
SEED=${SEED:-1234}
# DATA: a seqpar token file. Or INPUT_JSON (one {"text": ...} a line, as their preprocess_bookcorpus.py
# writes) with GPT-2's VOCAB_FILE and MERGE_FILE: tokenized here as their tools/preprocess_data.py
# --append-eod does (documents joined by <|endoftext|>). Neither: seqpar's built-in recall task.
DATA=${DATA:-}
if [ -z "$DATA" ] && [ -n "${INPUT_JSON:-}" ]; then
  DATA=$OUTPUT/$(basename "$INPUT_JSON" .json).tokens
  mkdir -p "$OUTPUT"
  "$SEQPAR" prepare-data \
    --input "$INPUT_JSON" \
    --output "$DATA" \
    --vocab-file "${VOCAB_FILE:-gpt2-vocab.json}" \
    --merge-file "${MERGE_FILE:-gpt2-merges.txt}" \
    --format jsonl \
    --workers 32 \
    --append-eod
  # --dataset-impl mmap, --tokenizer-type GPT2BPETokenizer: seqpar's token file is memory-mapped, and
  # --vocab-file/--merge-file are GPT-2's BPE.
fi

## Their DeepSpeed JSON (ds_config_gpt_TEMPLATE.json), fp16 and all: seqpar takes it as it is: fp16
## compute with DeepSpeed's dynamic loss scaler (its loss_scale_window, hysteresis, min_loss_scale,
## initial_scale_power) and f32 master weights, the batch sizes, ZeRO stage, clipping, steps_per_print.
mkdir -p "$OUTPUT"
CONFIG_JSON=$OUTPUT/ds_config_gbs${GLOBAL_BATCH}_mbs${MICRO_BATCH}_log${LOG_INTERVAL}_zero${ZERO_STAGE}.json
cat > "$CONFIG_JSON" <<JSON
{
  "train_batch_size": ${GLOBAL_BATCH},
  "train_micro_batch_size_per_gpu": ${MICRO_BATCH},
  "steps_per_print": ${LOG_INTERVAL},
  "zero_optimization": {"stage": ${ZERO_STAGE}},
  "gradient_clipping": 1.0,
  "prescale_gradients": false,
  "fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 500, "hysteresis": 2, "min_loss_scale": 1,
           "initial_scale_power": 11},
  "wall_clock_breakdown": false
}
JSON

args=(
  --preset "$PRESET"                          # (theirs: the GPT-3 XL block of the script) the architecture
  --num-layers "$NUM_LAYERS"                  # num_layers
  --hidden-size "$HIDDEN_SIZE"                # hidden_size
  --num-attention-heads "$NUM_ATTN_HEADS"     # num_heads; num_kv_heads = num_heads, head_dim = hidden / heads
  --ffn-hidden-size "$FFN_HIDDEN_SIZE"        # intermediate_size (Megatron's default 4 × hidden)
  --seq-length "$SEQ_LEN"                     # seq_len
  --max-position-embeddings "$SEQ_LEN"        # max_position_embeddings (the learned position table)
  --init-method-std "$INIT_STD"               # init_std
  --micro-batch-size "$MICRO_BATCH"           # micro_batch
  --global-batch-size "$GLOBAL_BATCH"         # grad_accum = global / (micro × dp), dp = world / sp
  --ds-sequence-parallel-size "$SP_SIZE"      # sp, sp_mode ulysses (DeepSpeed-Ulysses)
  --tensor-model-parallel-size 1              # accepted at 1 (seqpar has no tensor parallelism)
  --pipeline-model-parallel-size 1            # accepted at 1 (their --deepspeed_options; no pipeline)
  --no-pipeline-parallel                      # accepted, a note: nothing to turn off
  --zero-stage "$ZERO_STAGE"                  # zero_stage (also in the JSON: the same value)
  --lr "$LR"                                  # lr
  --min-lr "$MIN_LR"                          # min_lr_ratio = min_lr / lr
  --lr-decay-style cosine                     # lr_schedule linear_cosine (linear warmup, cosine to the floor)
  --lr-warmup-tokens "$LR_WARMUP_TOKENS"      # warmup_steps = ceil(tokens / (global batch × seq_len))
  --train-tokens "$TRAIN_TOKENS"              # steps = ceil(tokens / (global batch × seq_len))
  --lr-decay-tokens "$TRAIN_TOKENS"           # accepted: = the run's length (seqpar decays over the run)
  --adam-beta1 0.9                            # beta1
  --adam-beta2 0.95                           # beta2
  --weight-decay 0.1                          # weight_decay
  --clip-grad 1.0                             # clip (also gradient_clipping in the JSON)
  --seed "$SEED"                              # seed
  --use-flash-attn-triton                     # attn_implementation flash_attention_2: seqpar's flash kernel
  --no-document-mask                          # theirs by default (no --reset-attention-mask / --reset-
                                              # position-ids): a sample's documents see the ones before
                                              # them across the EOD token, positions running on
  --checkpoint-activations                    # activation_checkpointing
  --fp16                                      # mixed_precision fp16 (with the JSON's loss scaler)
  --hysteresis 2                              # hysteresis of the fp16 loss scaler (also in the JSON)
  --log-interval "$LOG_INTERVAL"              # log_every
  --eval-interval "$EVAL_INTERVAL"            # eval_every
  --eval-iters "$EVAL_ITERS"                  # eval_batches
  --save "$SAVE_DIR"                          # save_dir
  --save-interval "$SAVE_INTERVAL"            # save_every
  --deepspeed "$CONFIG_JSON"                  # theirs: --deepspeed --deepspeed_config FILE
  --device "$DEVICE"
)
if [ -n "$DATA" ]; then args+=(--data "$DATA"); fi  # theirs: --data-path PREFIX --data-impl mmap
# Not passed, with why (docs/coming-from-megatron-deepspeed.md): --train-samples and
# --exit-duration-in-mins (termination conditions set far beyond --train-tokens);
# --override-opt_param-scheduler, --split 949,50,1
# (seqpar evaluates on --eval-data), --num-workers 0,
# --no-async-tensor-model-parallel-allreduce (tensor parallelism), --load (seqpar: --resume auto), the
# tensorboard flags (seqpar: --metrics-out FILE.jsonl and its .svg plot), --log-optimizer-states-to-
# tensorboard, --deepspeed-activation-checkpointing (the same as --checkpoint-activations).

exec "$SEQPAR" launch --nproc-per-node "$NUM_GPUS" -- "$SEQPAR" train "${args[@]}" "$@"
