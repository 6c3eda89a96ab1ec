#!/usr/bin/env python3
"""Train ridgeserve's default MesaNet (flash-linear-attention 0.6.0 format) on one GPU for a
fixed wall-clock budget, then save it in bf16 with save_pretrained and evaluate it.

Needs a CUDA GPU (FLA's Triton kernels), torch, transformers 5.x, tokenizers, numpy and
flash-linear-attention==0.6.0 + fla-core==0.6.0 (see requirements.txt and README.md).

    python3 tools/train_default/train.py --data DATA --tokenizer TOKDIR --out OUT \
        --train-seconds 600 --stop-at 450 --post-deadline 530    # the shipped model (H200)

DATA holds train.npy / val.npy (uint16 ids, from encode_data.py). OUT receives:
    model/config.json, model/generation_config.json, model/model.safetensors  (bf16)
    metrics.json   parameters, steps, tokens, time, validation loss / perplexity
    score_segments.json   three validation segments of 513 ids with FLA's perplexity of each
                   (saved bf16 weights run in fp32) to compare with `ridgeserve score`
    samples.txt    sampled continuations (temperature 0.7, seed 1)

Schedule: AdamW, linear warm-up then cosine decay to 10%. The number of steps is fixed after
the first steps from the measured speed so that training ends within --train-seconds; the
budget is also enforced as a hard stop. Everything is seeded (torch, windows); the step count
depends on the GPU's speed and is recorded in metrics.json (an H200 for the shipped model).
--stop-at bounds training by the time since process start. The step count and the evaluation
points come from wall-clock time, so a rerun is close to, not identical with, the shipped run
(`--steps N` fixes the schedule). The checkpoint with the best validation loss (evaluated
every --eval-every seconds on a fixed validation subset) is the one saved.

Triton autotuning: with Triton's stock autotuner the first step on a fresh H200 took ~320 s,
because every autotuned FLA kernel is compiled and benchmarked once per config (up to 48 configs
per kernel, again for each new key such as the evaluation's batch or a new dtype). By default
(--single-config-autotune) every autotuner keeps ONE config, chosen by pick_single_config()
before fla is imported, so each kernel is compiled once and never benchmarked. This is valid for
FLA 0.6.0: the tuned meta-parameters (block sizes such as BK/BV/BT/BD, num_warps, num_stages)
reach the launch grids only through `meta[...]` lambdas, a single-config Autotuner skips
pruning and benchmarking and launches that config directly, and the kernels that MesaNet uses
mask their tails, so any listed config is correct for any shape; only speed can differ. If the
first step or the fp32 scoring fails anyway, the full config lists are restored and retried.
On the H200 the first step then took 16 s, and training ran at least as fast (13.3 vs 11.4
steps/s). --no-single-config-autotune restores Triton's autotuning.
"""

import argparse
import json
import math
import os
import time

T_START = time.time()

import numpy as np
import torch
import torch.nn.functional as F


def fla_classes():
    from fla.models import MesaNetConfig, MesaNetForCausalLM
    # transformers 5.x: FLA's list-valued _tied_weights_keys breaks post_init/save_pretrained
    MesaNetForCausalLM._tied_weights_keys = {"lm_head.weight": "model.embeddings.weight"}
    return MesaNetConfig, MesaNetForCausalLM


def log(*a):
    print(f"[{time.time() - T_START:7.1f}s]", *a, flush=True)


def pick_single_config(configs):
    """The one config a single-config autotuner keeps: num_warps nearest 4, num_stages nearest 2,
    every other meta-parameter (block sizes) at the lower median of its values. Smaller blocks
    need fewer registers and less shared memory, so the pick compiles wherever a larger one does.
    Ties (and lists that are not a full grid) go to the config matching most targets, first wins.
    """
    def attrs(c):
        d = {("kw", k): v for k, v in c.kwargs.items()}
        d.update({("cfg", "num_warps"): c.num_warps, ("cfg", "num_stages"): c.num_stages,
                  ("cfg", "num_ctas"): c.num_ctas, ("cfg", "maxnreg"): getattr(c, "maxnreg", None)})
        return d

    def order(v):
        return (v is None, not isinstance(v, (int, float)), v if isinstance(v, (int, float)) else str(v))

    table = [attrs(c) for c in configs]
    target = {}
    for name in {n for t in table for n in t}:
        vals = sorted({t.get(name) for t in table}, key=order)
        nums = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]
        if name == ("cfg", "num_warps") and nums:
            target[name] = min(nums, key=lambda v: (abs(math.log2(v) - 2), v))
        elif name == ("cfg", "num_stages") and nums:
            target[name] = min(nums, key=lambda v: (abs(v - 2), v))
        else:
            target[name] = vals[(len(vals) - 1) // 2]
    scores = [sum(t.get(n) == v for n, v in target.items()) for t in table]
    return configs[scores.index(max(scores))]


SINGLE_CONFIG_TUNERS = []   # (autotuner, the configs it was given)


def enable_single_config_autotune():
    """Make every Triton Autotuner created from now on keep one config (pick_single_config).
    Patches Autotuner.__init__, which both `triton.autotune` and FLA's own `fla_cache_autotune`
    (a CachedAutotuner subclass, used e.g. by cumsum, l2norm and causal_conv1d) go through, so it
    must run before fla is imported."""
    from triton.runtime import autotuner
    orig = autotuner.Autotuner.__init__
    if getattr(orig, "_single_config", False):
        return

    def init(self, fn, arg_names, configs, *args, **kwargs):
        given = list(configs) if configs else []
        if len(given) > 1:
            configs = [pick_single_config(given)]
        orig(self, fn, arg_names, configs, *args, **kwargs)
        SINGLE_CONFIG_TUNERS.append((self, given))

    init._single_config = True
    init.__wrapped__ = orig
    autotuner.Autotuner.__init__ = init


def single_config_report():
    """One line per autotuned kernel that has run: name, configs it had, the config kept."""
    lines = []
    for tuner, given in SINGLE_CONFIG_TUNERS:
        cfg = getattr(tuner, "best_config", None)
        if cfg is not None:
            lines.append(f"{tuner.base_fn.__name__}: {len(tuner.configs)} of {len(given)} configs: {cfg}")
    return sorted(set(lines))


def restore_autotune_configs():
    """Fallback if a kept config fails (e.g. out of shared memory): give every autotuner its
    full config list back, so Triton autotunes (and skips failing configs) from then on."""
    restored = 0
    for tuner, given in SINGLE_CONFIG_TUNERS:
        if len(given) > len(tuner.configs):
            tuner.configs = given
            tuner.cache.clear()
            restored += 1
    return restored


def run_with_autotune_fallback(what, fn):
    """fn(); if it raises while single-config autotuning is active, restore the configs and retry."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        n = restore_autotune_configs()
        if not n:
            raise
        log(f"{what} failed with single-config autotune ({type(e).__name__}: {e}); "
            f"restored the full configs of {n} autotuned kernels and retrying")
        return fn()


def batch_windows(data, starts, seq):
    idx = starts[:, None] + torch.arange(seq + 1, device=data.device)[None]
    w = data[idx]
    return w[:, :-1], w[:, 1:]


@torch.no_grad()
def evaluate(model, val, seq, max_windows, bs, amp):
    model.eval()
    n = min(max_windows, (val.numel() - 1) // seq)
    tot, cnt = 0.0, 0
    for i in range(0, n, bs):
        starts = torch.arange(i, min(n, i + bs), device=val.device) * seq
        x, y = batch_windows(val, starts, seq)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            logits = model(input_ids=x, use_cache=False).logits
        tot += F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum").item()
        cnt += y.numel()
    model.train()
    return tot / cnt, cnt


@torch.no_grad()
def segment_ppl(model, ids):
    x = torch.tensor(ids, dtype=torch.long, device="cuda")[None]
    logits = model(input_ids=x, use_cache=False).logits[0, :-1].float()
    nll = F.cross_entropy(logits, x[0, 1:], reduction="mean").item()
    return math.exp(nll)


@torch.no_grad()
def sample(model, prompt_ids, n_new, temperature, gen):
    x = torch.tensor(prompt_ids, dtype=torch.long, device="cuda")[None]
    out = model(input_ids=x, use_cache=True)
    pkv, ids = out.past_key_values, []
    logits = out.logits[0, -1].float()
    for _ in range(n_new):
        p = torch.softmax(logits / temperature, -1)
        nxt = int(torch.multinomial(p, 1, generator=gen).item())
        ids.append(nxt)
        if nxt == 0:
            break
        out = model(input_ids=torch.tensor([[nxt]], device="cuda"), past_key_values=pkv, use_cache=True)
        pkv = out.past_key_values
        logits = out.logits[0, -1].float()
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--train-seconds", type=float, default=330,
                    help="training wall-clock budget, counted from the first step (Triton compile included)")
    ap.add_argument("--stop-at", type=float, default=0,
                    help="if > 0: also stop training this many seconds after the process started")
    ap.add_argument("--eval-every", type=float, default=30,
                    help="seconds between evaluations on the first 48 validation windows (best is kept)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=7)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--post-deadline", type=float, default=540,
                    help="seconds after process start after which no optional post-training work "
                         "(samples, fp32 full validation) is started")
    ap.add_argument("--single-config-autotune", action=argparse.BooleanOptionalAction, default=True,
                    help="keep one config per Triton autotuned kernel (no autotune benchmarking); "
                         "--no-single-config-autotune: Triton's stock autotuning")
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (0: from the time budget)")
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    os.makedirs(a.out, exist_ok=True)

    if a.single_config_autotune:
        enable_single_config_autotune()
    import fla
    import transformers
    from tokenizers import Tokenizer
    MesaNetConfig, MesaNetForCausalLM = fla_classes()
    tok = Tokenizer.from_file(os.path.join(a.tokenizer, "tokenizer.json"))
    V = tok.get_vocab_size()
    eos = tok.token_to_id("<|endoftext|>")
    log(f"torch {torch.__version__} transformers {transformers.__version__} fla {getattr(fla, '__version__', '?')} "
        f"gpu {torch.cuda.get_device_name(0)} vocab {V}")

    train = torch.from_numpy(np.load(os.path.join(a.data, "train.npy")).astype(np.int64)).cuda()
    val = torch.from_numpy(np.load(os.path.join(a.data, "val.npy")).astype(np.int64)).cuda()
    log(f"train tokens {train.numel()} val tokens {val.numel()}")

    cfg = MesaNetConfig(hidden_size=a.hidden, num_heads=a.heads, head_dim=a.head_dim, num_hidden_layers=a.layers,
                        vocab_size=V, tie_word_embeddings=True, use_output_gate=False,
                        bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
                        max_cg_step_training=30, max_cg_step_decoding=30, max_position_embeddings=4096)
    cfg.architectures = ["MesaNetForCausalLM"]
    model = MesaNetForCausalLM._from_config(cfg, dtype=torch.float32).cuda()
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    log(f"parameters {n_params} ({n_params / 1e6:.2f} M, tied embeddings)")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "conv1d" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "conv1d" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    gen = torch.Generator(device="cuda").manual_seed(a.seed + 1)
    tokens_per_step = a.batch * a.seq
    max_start = train.numel() - a.seq - 1

    amp = True
    total_steps = a.steps or 10 ** 9
    step, t_train0, t_measure, first_step_s = 0, None, None, None
    loss_sum, loss_n = torch.zeros((), device="cuda"), 0   # training loss since the last evaluation
    best = (float("inf"), None, -1)
    history = []
    last_eval = None
    train_deadline = None

    def lr_at(s):
        if s < a.warmup:
            return a.lr * (s + 1) / a.warmup
        frac = min(1.0, (s - a.warmup) / max(1, total_steps - a.warmup))
        return a.lr * (a.min_lr_ratio + (1 - a.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))

    def save_bf16(state, where):
        mb = MesaNetForCausalLM._from_config(cfg, dtype=torch.bfloat16)
        mb.load_state_dict(state)
        mb.generation_config.bos_token_id = eos
        mb.generation_config.eos_token_id = eos
        mb.generation_config.pad_token_id = eos
        mb.save_pretrained(where)
        return mb

    def do_eval(final=False):
        nonlocal best, last_eval, loss_sum, loss_n
        vl, cnt = evaluate(model, val, a.seq, 10 ** 9 if final else 48, 16, amp)
        tl = loss_sum.item() / loss_n if loss_n else float("nan")
        loss_sum, loss_n = torch.zeros((), device="cuda"), 0
        history.append({"step": step, "tokens": step * tokens_per_step, "val_loss": vl, "val_ppl": math.exp(vl),
                        "train_loss": tl, "lr": lr_at(max(0, step - 1)), "time_s": time.time() - t_train0})
        log(f"eval step {step} val_loss {vl:.4f} ppl {math.exp(vl):.2f} on {cnt} tokens; "
            f"train_loss since last eval {tl:.4f}")
        if vl < best[0]:
            best = (vl, {k: v.detach().clone() for k, v in model.state_dict().items()}, step)
            save_bf16(best[1], os.path.join(a.out, "model"))
        last_eval = time.time()

    while step < total_steps:
        if step == 0:
            t_train0 = time.time()
            train_deadline = t_train0 + a.train_seconds
            if a.stop_at > 0:
                train_deadline = min(train_deadline, T_START + a.stop_at)
            last_eval = t_train0
        starts = torch.randint(0, max_start, (a.batch,), device="cuda", generator=gen)
        x, y = batch_windows(train, starts, a.seq)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)

        def fwd_bwd():
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                logits = model(input_ids=x, use_cache=False).logits
            loss = F.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            return loss

        try:
            loss = run_with_autotune_fallback("the first step", fwd_bwd) if step == 0 else fwd_bwd()
        except Exception as e:  # noqa: BLE001
            if step == 0 and amp:
                log(f"bf16 autocast failed ({type(e).__name__}: {e}); training in fp32 instead")
                amp = False
                opt.zero_grad(set_to_none=True)
                continue
            raise
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_sum += loss.detach()
        loss_n += 1
        step += 1
        if step == 1:
            torch.cuda.synchronize()
            last_eval = time.time()   # the first step includes Triton's compile (and autotune)
            first_step_s = last_eval - t_train0
            log(f"first step (Triton compile{'' if a.single_config_autotune else ' + autotune'}) "
                f"took {first_step_s:.1f} s")
        if step in (1, 5, 10, 20) or step % 100 == 0:
            log(f"step {step} loss {loss.item():.4f} gnorm {gn.item():.3f} lr {lr_at(step - 1):.2e} "
                f"amp {amp} {step * tokens_per_step / (time.time() - t_train0):.0f} tok/s")
        if step == 10:
            torch.cuda.synchronize()
            t_measure = time.time()
        if step == 40 and not a.steps:
            torch.cuda.synchronize()
            rate = 30 / (time.time() - t_measure)
            left = train_deadline - time.time()
            # evals take a few percent of the time
            total_steps = step + int(rate * left * 0.93)
            log(f"measured {rate:.2f} steps/s -> total_steps {total_steps} "
                f"({total_steps * tokens_per_step / 1e6:.1f} M tokens)")
        if time.time() >= train_deadline:
            log(f"time budget reached at step {step} of {total_steps}")
            break
        if time.time() - last_eval >= a.eval_every:
            do_eval()
    torch.cuda.synchronize()
    train_time = time.time() - t_train0
    do_eval()
    log(f"training done: {step} steps, {step * tokens_per_step} tokens, {train_time:.1f} s "
        f"({train_time - first_step_s:.1f} s after the first step); best step {best[2]}")
    reported = set()
    if a.single_config_autotune:
        reported = set(single_config_report())
        log(f"single-config autotune: {len(reported)} autotuned kernels ran in training:")
        for line in sorted(reported):
            log("  " + line)

    # the shipped checkpoint: bf16 (save_bf16 wrote it at the best evaluation)
    model.load_state_dict(best[1])
    full_master, nval = evaluate(model, val, a.seq, 10 ** 9, 16, amp)
    log(f"full validation (fp32 master weights, amp={amp}): loss {full_master:.4f} ppl {math.exp(full_master):.3f} "
        f"on {nval} tokens")
    metrics = {
        "parameters": n_params, "config": {k: getattr(cfg, k) for k in
                                           ("hidden_size", "num_heads", "head_dim", "num_hidden_layers",
                                            "vocab_size", "intermediate_size", "hidden_ratio",
                                            "tie_word_embeddings", "use_output_gate")},
        "steps": step, "best_step": best[2], "tokens_seen": step * tokens_per_step,
        "tokens_per_step": tokens_per_step, "train_seconds": train_time, "first_step_s": first_step_s,
        "train_seconds_after_first_step": train_time - first_step_s, "amp_bf16": amp,
        "single_config_autotune": a.single_config_autotune,
        "train_tokens_in_set": int(train.numel()), "epochs": step * tokens_per_step / train.numel(),
        "val_tokens": nval, "val_loss_master": full_master, "val_ppl_master": math.exp(full_master),
        "history": history, "args": vars(a),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "fla": getattr(fla, "__version__", "0.6.0"), "triton": __import__("triton").__version__},
        "gpu": torch.cuda.get_device_name(0), "wall_s_total": time.time() - T_START,
    }
    json.dump(metrics, open(os.path.join(a.out, "metrics.json"), "w"), indent=1)

    # The saved bf16 file run in fp32 (what `ridgeserve score` computes). A new dtype means a new
    # Triton compile of every kernel, so the optional parts are skipped when time is short.
    m32 = MesaNetForCausalLM.from_pretrained(os.path.join(a.out, "model"), dtype=torch.float32).cuda().eval()
    vnp = val.cpu().numpy()
    segs = []
    for off in (1, 40001, 80001):
        ids = [int(i) for i in vnp[off:off + 513]]
        ppl = run_with_autotune_fallback("fp32 scoring", lambda: segment_ppl(m32, ids))
        segs.append({"offset": off, "ids": ids, "ppl_fp32": ppl})
        log(f"segment {off}: ppl (bf16 weights, fp32 compute) {segs[-1]['ppl_fp32']:.4f}")
    json.dump(segs, open(os.path.join(a.out, "score_segments.json"), "w"))

    prompts = ["It is a truth universally acknowledged, that",
               "In the beginning",
               "The whale",
               "She walked into the room and",
               "The hacker",
               "<|im_start|>user\nContinue the text: The sea was calm that morning.<|im_end|>\n<|im_start|>assistant\n",
               "<|im_start|>user\nTell me a fortune.<|im_end|>\n<|im_start|>assistant\n"]
    g = torch.Generator(device="cuda").manual_seed(1)
    with open(os.path.join(a.out, "samples.txt"), "w") as f:
        for p in prompts:
            if time.time() - T_START > a.post_deadline:
                log("post deadline reached: no more samples")
                break
            ids = tok.encode(p, add_special_tokens=False).ids
            try:
                new = sample(m32, ids, 60, 0.7, g)
            except Exception as e:  # noqa: BLE001  (optional output: keep what is done)
                log(f"sampling failed: {type(e).__name__}: {e}")
                break
            text = tok.decode(ids + new, skip_special_tokens=False)
            f.write(json.dumps({"prompt": p, "prompt_ids": ids, "new_ids": new, "text": text}) + "\n")
            f.flush()
            log("SAMPLE", repr(text))

    if time.time() - T_START < a.post_deadline - 25:
        full_f32, _ = evaluate(m32, val, a.seq, 10 ** 9, 16, False)
        metrics["val_ppl_bf16_weights_fp32"] = math.exp(full_f32)
        log(f"full validation, saved bf16 weights run in fp32: ppl {math.exp(full_f32):.3f}")
    else:
        log("post deadline near: fp32 full validation skipped")
    if a.single_config_autotune:
        for line in single_config_report():
            if line not in reported:
                log("  after training: " + line)
    metrics["wall_s_total"] = time.time() - T_START
    json.dump(metrics, open(os.path.join(a.out, "metrics.json"), "w"), indent=1)
    log("all done")


if __name__ == "__main__":
    main()
