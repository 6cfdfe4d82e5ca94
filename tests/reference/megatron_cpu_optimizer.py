"""megatron-core's own training step on the CPU, for the reference tests that
need Megatron's optimizer: GPTModel (megatron_cpu.py) in its
DistributedDataParallel wrapper (Float16Module first for fp16/bf16), the
optimizer get_megatron_optimizer builds (torch's AdamW inside, as megatron-core
uses without Transformer Engine or apex: FP32Optimizer,
Float16OptimizerWithFloat16Params or the DistributedOptimizer) and its
OptimizerParamScheduler.

megatron-core 0.16 allocates its buffers on torch.cuda.current_device() and
creates a few tensors with device="cuda"; patch() sends those to the CPU and
lets its dtype checks (param.type() == "torch.cuda.FloatTensor") pass for CPU
tensors. load_fixes() mends two faults of the DistributedOptimizer's loading
when its inner optimizer is torch's AdamW (not Megatron's code path on a GPU,
where it is a fused Adam): a 'step' key that the saved state lacks, and one
step tensor shared by every parameter after load_state_dict.

  patch()                                   # once per process, after megatron_cpu.init
  model, opt, sched = build(mode, dist, cfg) # mode: fp32 | bf16 | fp16
  loss = step(model, opt, sched, micro_batches, vocab)
"""
import torch
import torch.nn.functional as F

import megatron_cpu


def _on_cpu(factory):
    def make(*args, **kwargs):
        device = kwargs.get("device")
        if (isinstance(device, str) and device.startswith("cuda")) or (isinstance(device, torch.device) and device.type == "cuda"):
            kwargs["device"] = "cpu"
        return factory(*args, **kwargs)
    return make


def patch():
    torch.cuda.current_device = lambda: "cpu"
    for name in ("tensor", "zeros", "empty", "ones", "full"):
        setattr(torch, name, _on_cpu(getattr(torch, name)))
    plain_type = torch.Tensor.type

    def cuda_type_name(self, *args, **kwargs):
        name = plain_type(self, *args, **kwargs)
        if args or kwargs or not name.startswith("torch.") or name.startswith("torch.cuda."):
            return name
        return "torch.cuda." + name[len("torch."):]
    torch.Tensor.type = cuda_type_name
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # the fp16 grad scaler's load_state_dict


def load_fixes():
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    def set_states(self, model_param, tensors):
        group, order = self.model_param_group_index_map[model_param]
        main = self.optimizer.param_groups[group]["params"][order]
        targets = {"param": main, **self.optimizer.state[main]}
        with torch.no_grad():
            for key, value in tensors.items():
                targets[key].copy_(value)
    DistributedOptimizer._set_main_param_and_optimizer_states = set_states
    plain_load = DistributedOptimizer.load_state_dict

    def load_state_dict(self, state_dict):
        plain_load(self, state_dict)
        for s in self.optimizer.state.values():
            if torch.is_tensor(s.get("step")):
                s["step"] = s["step"].clone()
    DistributedOptimizer.load_state_dict = load_state_dict


def build(mode, dist, layers, hidden, heads, seq, vocab, seed, lr, weight_decay=0.01, iterations=10, samples_per_iteration=1, schedule=None,
          tp=1, pp=1, bucket=None):
    """The model in megatron-core's wrappers, its optimizer (AdamW, betas 0.9/0.999, eps 1e-8, no
    clipping) and a constant learning-rate schedule counted in samples, as Megatron-LM steps it.
    `schedule`: OptimizerParamScheduler arguments instead of the constant one, and a scheduler that,
    as Megatron-LM's by default, asserts that a checkpoint's schedule is its own. tp, pp: this
    process's part of a model cut as megatron_cpu.init(..., tp, pp) set up (its pipeline stage's
    layers, the embedding on the first stage and the output layer on the last). bucket: the gradient
    buffer's bucket size with --overlap-grad-reduce (None: without it, one bucket)."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron.core.transformer.module import Float16Module
    from megatron.core import parallel_state
    cfg = megatron_cpu.config(layers, hidden, heads, tp=tp, pp=pp)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[mode]
    cfg.bf16, cfg.fp16, cfg.params_dtype = mode == "bf16", mode == "fp16", dtype
    if pp > 1:
        cfg.pipeline_dtype = dtype
    torch.manual_seed(seed)
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    model = GPTModel(cfg, get_gpt_layer_local_spec(), vocab_size=vocab, max_sequence_length=seq, position_embedding_type="learned_absolute",
                     share_embeddings_and_output_weights=True, pre_process=parallel_state.is_pipeline_first_stage(),
                     post_process=parallel_state.is_pipeline_last_stage())
    if mode != "fp32":
        model = Float16Module(cfg, model)
    # Megatron-LM accumulates bf16 gradients in fp32; it checks for NaN only without a dynamic loss scale
    ddp = DistributedDataParallelConfig(grad_reduce_in_fp32=mode == "bf16", use_distributed_optimizer=dist, check_for_nan_in_grad=mode != "fp16",
                                        overlap_grad_reduce=bucket is not None, bucket_size=bucket)
    model = DistributedDataParallel(cfg, ddp, model)
    ocfg = OptimizerConfig(optimizer="adam", lr=lr, min_lr=lr, weight_decay=weight_decay, adam_beta1=0.9, adam_beta2=0.999, adam_eps=1e-8,
                           clip_grad=0.0, bf16=mode == "bf16", fp16=mode == "fp16", params_dtype=dtype, use_distributed_optimizer=dist,
                           initial_loss_scale=2.0 ** 12)  # fp16: Megatron's 2**32 skips the first steps
    opt = get_megatron_optimizer(ocfg, [model])
    total = iterations * samples_per_iteration
    if schedule is not None:
        sched = OptimizerParamScheduler(opt, start_wd=weight_decay, end_wd=weight_decay, wd_incr_steps=total, wd_incr_style="constant",
                                        use_checkpoint_opt_param_scheduler=False, override_opt_param_scheduler=False, **schedule)
        return model, opt, sched
    sched = OptimizerParamScheduler(opt, init_lr=lr, max_lr=lr, min_lr=lr, lr_warmup_steps=0, lr_decay_steps=total, lr_decay_style="constant",
                                    start_wd=weight_decay, end_wd=weight_decay, wd_incr_steps=total, wd_incr_style="constant")
    return model, opt, sched


def step(model, opt, sched, micro_batches, vocab, samples):
    """One iteration over the micro-batches (B, T+1), gradients averaged over them as Megatron's
    schedule does; returns the mean loss. The scheduler advances by the samples."""
    from megatron.core.distributed import finalize_model_grads
    model.zero_grad_buffer()
    opt.zero_grad()
    T = micro_batches[0].shape[1] - 1
    total = 0.0
    for b in micro_batches:
        logits = model(b[:, :-1], megatron_cpu.positions(T), megatron_cpu.causal_mask(T))
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), b[:, 1:].reshape(-1))
        scaled = loss / len(micro_batches)
        (opt.scale_loss(scaled) if hasattr(opt, "scale_loss") else scaled).backward()
        total += loss.item()
    finalize_model_grads([model])
    ok, _, _ = opt.step()
    assert ok, "megatron-core skipped a step"
    sched.step(increment=samples)
    return total / len(micro_batches)


def fp32_state(model, opt, dist):
    """The optimizer's fp32 weights, Adam's moments (by megatron-core's parameter names) and step."""
    inner = opt.chained_optimizers[0]
    names = {p: n.removeprefix("module.").removeprefix("module.") for n, p in model.named_parameters()}
    w, m, v, step = {}, {}, {}, None
    if dist:
        for p, name in names.items():
            s = inner._get_main_param_and_optimizer_states(p)
            w[name], m[name], v[name] = (s[k].detach().clone().view(p.shape).float() for k in ("param", "exp_avg", "exp_avg_sq"))
        step = inner.optimizer.param_groups[0].get("step") or next(iter(inner.optimizer.state.values()))["step"]
    else:
        model_groups = getattr(inner, "float16_groups", None)
        for g, group in enumerate(inner.optimizer.param_groups):
            for i, main in enumerate(group["params"]):
                name = names[model_groups[g][i] if model_groups is not None else main]
                st = inner.optimizer.state[main]
                w[name], m[name], v[name], step = main.detach().clone().float(), st["exp_avg"].clone(), st["exp_avg_sq"].clone(), st["step"]
    return {"weights": w, "exp_avg": m, "exp_avg_sq": v, "step": int(float(step))}
