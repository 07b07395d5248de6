#!/usr/bin/env python3
"""Trains Medusa draft heads for SmolLM2-135M-Instruct from its own hidden states.

Runs on the GPU machine (torch, transformers, safetensors, numpy; no network):

  python3 scripts/distill_head.py --gguf /tmp/smollm2.gguf --out $OUT/head

The teacher, the corpus and the teacher's answers are distill_draft.py's
(the Q4_1 GGUF dequantized with NumPy; Python standard library docstrings
asked about in the chat template; answers sampled at temperature 0.7).
The heads read the teacher's last hidden state h_t (its final norm's
output, the LM head's input) at position t, whose logits chose token t+1;
head k (k = 0 .. K-1) predicts token t+2+k:

  z_k = h_t + SiLU(W_k h_t + b_k),   logits_k = lm_head(z_k)

with the teacher's own (frozen) LM head, as kiln runs it
(runtime/spec/draft_head.h). W_k and b_k start at zero (so z_k = h_t) and
are trained with KL(teacher || head) against the teacher's distribution
at position t+1+k (the one that predicts token t+2+k), at every position
of prompt and answer, AdamW, cosine schedule, fixed seed. Written as
config.json ({"kind": "medusa", "hidden_size", "heads"}) and
model.safetensors (f32 heads.{k}.weight [H, H], heads.{k}.bias [H];
about 5 MB for 4 heads at H = 576), plus head.json with the settings and
each head's top-1 agreement with the teacher's greedy token on held-out
answers.
"""

import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from distill_draft import ASKS, Gguf, load_tokenizer, stdlib_docstrings, teacher_config, teacher_state, tokenizer_files  # noqa: E402


class MedusaHeads(torch.nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(heads, hidden, hidden))
        self.bias = torch.nn.Parameter(torch.zeros(heads, hidden))

    def forward(self, h, k):  # h [..., H] -> z_k [..., H]
        return h + F.silu(h @ self.weight[k].T + self.bias[k])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gguf", required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--out", required=True, help="the checkpoint directory to write")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--samples", type=int, default=2048, help="teacher answers to train on")
    p.add_argument("--answer-tokens", type=int, default=160)
    p.add_argument("--gen-batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-limit", type=float, default=480, help="seconds for the whole run, training stops early")
    args = p.parse_args()

    start = time.time()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    os.makedirs(args.out, exist_ok=True)

    from safetensors.torch import save_file
    from transformers import LlamaForCausalLM

    g = Gguf(args.gguf)
    config = teacher_config(g)
    teacher = LlamaForCausalLM(config)
    missing, unexpected = teacher.load_state_dict(teacher_state(g, config), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        sys.exit(f"teacher weights: missing {missing}, unexpected {unexpected}")
    teacher.tie_weights()
    teacher = teacher.to(device, torch.bfloat16).eval()
    for param in teacher.parameters():
        param.requires_grad_(False)
    tok_dir = os.path.join(args.out, ".tokenizer")
    os.makedirs(tok_dir, exist_ok=True)
    tokenizer_files(g, tok_dir)
    tok = load_tokenizer(tok_dir)
    print(f"[head] teacher {config.num_hidden_layers} layers x {config.hidden_size} loaded "
          f"({time.time() - start:.0f}s)", flush=True)

    docs = stdlib_docstrings()
    corpus = f"Python {sys.version.split()[0]} standard library docstrings ({len(docs)} of them)"
    print(f"[head] corpus: {corpus}", flush=True)
    rng = random.Random(args.seed)
    prompts = []
    for i in range(args.samples):
        ask = ASKS[i % len(ASKS)].format(doc=rng.choice(docs))
        prompts.append(tok.apply_chat_template([{"role": "user", "content": ask}], tokenize=False,
                                               add_generation_prompt=True))
    tok.padding_side = "left"
    sequences = []
    with torch.no_grad():
        for b in range(0, len(prompts), args.gen_batch):
            batch = tok(prompts[b : b + args.gen_batch], return_tensors="pt", padding=True,
                        add_special_tokens=False).to(device)
            out = teacher.generate(**batch, max_new_tokens=args.answer_tokens, do_sample=True, temperature=0.7,
                                   top_p=0.95, pad_token_id=tok.pad_token_id)
            prompt_len = batch["input_ids"].shape[1]
            for row, mask in zip(out, batch["attention_mask"]):
                pad = int((mask == 0).sum())
                ends = (row[prompt_len:] == tok.eos_token_id).nonzero()
                end = prompt_len + int(ends[0]) + 1 if len(ends) else len(row)
                sequences.append(row[pad:end].cpu())
    print(f"[head] {len(sequences)} teacher answers ({time.time() - start:.0f}s)", flush=True)

    hidden, K = config.hidden_size, args.heads
    heads = MedusaHeads(hidden, K).to(device)
    lm_head = teacher.lm_head.weight  # [V, H], bf16, frozen
    opt = torch.optim.AdamW(heads.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    warmup = max(1, args.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps)))
    pad = tok.pad_token_id

    def teacher_pass(rows):
        length = max(len(r) for r in rows)
        ids = torch.full((len(rows), length), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), length), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = r
            mask[i, : len(r)] = 1
        ids, mask = ids.to(device), mask.to(device)
        with torch.no_grad():
            out = teacher(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        # hidden_states[-1] is after the final norm: the LM head's input.
        return out.hidden_states[-1].float(), out.logits.float(), mask

    losses = []
    held_out = sequences[-64:]
    order = list(range(len(sequences) - len(held_out)))
    step = 0
    while step < args.steps and time.time() - start < args.time_limit:
        rng.shuffle(order)
        for b in range(0, len(order) - args.batch + 1, args.batch):
            h, target, mask = teacher_pass([sequences[i] for i in order[b : b + args.batch]])
            loss = 0.0
            for k in range(K):
                # h_t predicts token t+2+k; the teacher's row t+1+k predicts it too.
                span = h.shape[1] - 1 - k
                if span <= 0:
                    continue
                with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
                    z = heads(h[:, :span], k)
                    logits = (z.to(lm_head.dtype) @ lm_head.T).float()
                t = target[:, 1 + k : 1 + k + span]
                m = (mask[:, 1 + k : 1 + k + span] * mask[:, :span]).float()
                kl = F.kl_div(F.log_softmax(logits, -1), F.log_softmax(t, -1), log_target=True,
                              reduction="none").sum(-1)
                loss = loss + (kl * m).sum() / m.sum().clamp(min=1)
            loss = loss / K
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(heads.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            step += 1
            if step % 100 == 0:
                print(f"[head] step {step}: KL {np.mean(losses[-100:]):.3f} ({time.time() - start:.0f}s)",
                      flush=True)
            if step >= args.steps or time.time() - start >= args.time_limit:
                break

    # Each head's top-1 agreement with the teacher's greedy token at its depth.
    agree, total = [0] * K, [0] * K
    with torch.no_grad():
        for r in held_out:
            h, target, _ = teacher_pass([r])
            greedy = target.argmax(-1)[0]
            for k in range(K):
                span = h.shape[1] - 1 - k
                if span <= 0:
                    continue
                z = heads(h[:, :span], k)
                pred = (z.to(lm_head.dtype) @ lm_head.T).float().argmax(-1)[0]
                agree[k] += int((pred == greedy[1 + k : 1 + k + span]).sum())
                total[k] += span
    agreement = [a / max(t, 1) for a, t in zip(agree, total)]
    print(f"[head] top-1 agreement with the teacher by head: {', '.join(f'{a:.3f}' for a in agreement)}",
          flush=True)

    tensors = {}
    for k in range(K):
        tensors[f"heads.{k}.weight"] = heads.weight[k].detach().float().cpu().contiguous()
        tensors[f"heads.{k}.bias"] = heads.bias[k].detach().float().cpu().contiguous()
    save_file(tensors, os.path.join(args.out, "model.safetensors"))
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump({"kind": "medusa", "hidden_size": hidden, "heads": K}, f, indent=2)
    with open(os.path.join(args.out, "head.json"), "w") as f:
        json.dump({"teacher": os.path.basename(args.gguf), "corpus": corpus, "seed": args.seed, "steps": step,
                   "heads": K, "samples": len(sequences), "answer_tokens": args.answer_tokens,
                   "final_kl": float(np.mean(losses[-100:])) if losses else None,
                   "top1_agreement": agreement, "seconds": time.time() - start}, f, indent=2)
    for name in os.listdir(tok_dir):
        os.remove(os.path.join(tok_dir, name))
    os.rmdir(tok_dir)
    size = sum(os.path.getsize(os.path.join(args.out, n)) for n in os.listdir(args.out))
    print(f"[head] wrote {args.out} ({size / 1e6:.1f} MB, {time.time() - start:.0f}s)", flush=True)


if __name__ == "__main__":
    main()
