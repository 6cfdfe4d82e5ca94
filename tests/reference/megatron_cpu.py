"""megatron-core's GPTModel on the CPU, for the reference tests that build one:
a Gloo group through a file rendezvous (no port to pick), the few CUDA-only
defaults bypassed (the dropout RNG tracker's fork, the global memory buffer;
the caller gives the causal mask), tanh GELU as Megatron's default
--bias-gelu-fusion computes it (or erf, as --no-bias-gelu-fusion), tied
embeddings, learned positions.

  init(work_dir, rank, world, tp, pp)  # once per process (tp, pp: megatron-core's model parallelism, 1 by default)
  model = gpt(layers, hidden, heads, seq, vocab, seed)
  logits = model(tokens, positions(T), causal_mask(T))   # (B, T, V)
"""
import contextlib
import os

import torch
import torch.nn.functional as F
from megatron.core import parallel_state, tensor_parallel
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer import TransformerConfig
import megatron.core.transformer.dot_product_attention as dpa


class _NoFork:
    def fork(self, *a, **k):
        return contextlib.nullcontext()


class _CpuBuffer:
    def get_tensor(self, shape, dtype, name, *a, **k):
        return torch.empty(shape, dtype=dtype)


def init(work, rank=0, world=1, tp=1, pp=1):
    torch.distributed.init_process_group("gloo", init_method="file://" + os.path.abspath(os.path.join(work, "rendezvous")),
                                         rank=rank, world_size=world)
    parallel_state.initialize_model_parallel(tp, pp)
    tensor_parallel.get_cuda_rng_tracker = lambda *a, **k: _NoFork()
    dpa.tensor_parallel.get_cuda_rng_tracker = tensor_parallel.get_cuda_rng_tracker
    parallel_state._GLOBAL_MEMORY_BUFFER = _CpuBuffer()


def config(layers, hidden, heads, erf=False, tp=1, pp=1):
    """erf: Megatron's --no-bias-gelu-fusion (plain F.gelu); else its fused bias-GELU's tanh approximation."""
    return TransformerConfig(num_layers=layers, hidden_size=hidden, num_attention_heads=heads, use_cpu_initialization=True,
                             tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, pipeline_dtype=torch.float32 if pp > 1 else None,
                             activation_func=F.gelu if erf else (lambda x: F.gelu(x, approximate="tanh")), hidden_dropout=0.0,
                             attention_dropout=0.0, init_method_std=0.02)


def gpt(layers, hidden, heads, seq, vocab, seed, erf=False, tp=1):
    torch.manual_seed(seed)
    return GPTModel(config(layers, hidden, heads, erf, tp=tp), get_gpt_layer_local_spec(), vocab_size=vocab, max_sequence_length=seq,
                    position_embedding_type="learned_absolute", share_embeddings_and_output_weights=True)


def positions(T):
    return torch.arange(T).unsqueeze(0)


def causal_mask(T):
    return torch.triu(torch.ones(1, 1, T, T, dtype=torch.bool), diagonal=1)
