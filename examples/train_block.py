"""Train a small llama-style transformer block with `fuser.jit`, next to the same model in eager
PyTorch from the same initial weights, and compare the losses step by step.

    python examples/train_block.py             # CPU: a tiny model, kernels in Triton's interpreter
    python examples/train_block.py --steps 20

The model is an ordinary nn.Module (embedding, RMSNorm, causal attention with RoPE, SwiGLU MLP,
residuals, an output head and cross-entropy). `fuser.jit(model)` compiles forward and backward;
the embedding lookup runs through ATen inside its fusion, and its gradient (an `index_put`,
which has no lowering) runs through ATen between fusions: `fallback_ops=1`. Batches of
different lengths reuse the compiled program. With a GPU the script also times a training step
against eager and `torch.compile`.
"""
from __future__ import annotations

import argparse
import copy
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import fuser


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class Block(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, hidden: int):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, dim)
        self.attn_norm = RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.mlp_norm = RMSNorm(dim)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.out_norm = RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def attention(self, x, cos, sin):
        b, s, dim = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, dim // self.heads).unbind(2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        probs = torch.softmax(scores.masked_fill(mask, float("-inf")).float(), dim=-1).to(q.dtype)
        return self.proj((probs @ v).transpose(1, 2).reshape(b, s, dim))

    def forward(self, tokens, targets, cos, sin):
        h = self.embed(tokens)
        h = h + self.attention(self.attn_norm(h), cos, sin)
        h = h + self.down(F.silu(self.gate(self.mlp_norm(h))) * self.up(self.mlp_norm(h)))
        logits = self.head(self.out_norm(h))
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def rope_tables(seq: int, head_dim: int, device):
    freqs = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    angles = torch.outer(torch.arange(seq, device=device).float(), freqs)
    cos, sin = (torch.cat([f(angles)] * 2, -1)[:, None, :] for f in (torch.cos, torch.sin))
    return cos, sin  # [seq, 1, head_dim], broadcast over heads


def batch(vocab: int, b: int, s: int, device):
    tokens = torch.randint(0, vocab, (b, s + 1), device=device)
    return tokens[:, :-1], tokens[:, 1:]


def train(model, steps, sizes, cfg, device, seed=0):
    """Losses of `steps` AdamW steps on a fixed stream of random batches."""
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    losses = []
    for step in range(steps):
        b, s = sizes[step % len(sizes)]
        tokens, targets = batch(cfg["vocab"], b, s, device)
        cos, sin = rope_tables(s, cfg["dim"] // cfg["heads"], device)
        loss = model(tokens, targets, cos, sin)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    torch.random.set_rng_state(gen_state)
    return losses


def step_time(model, cfg, device, b, s, iters=20):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens, targets = batch(cfg["vocab"], b, s, device)
    dtype = next(model.parameters()).dtype  # rotary tables in the weights' dtype (bf16 here)
    cos, sin = (t.to(dtype) for t in rope_tables(s, cfg["dim"] // cfg["heads"], device))

    def step():
        loss = model(tokens, targets, cos, sin)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / iters * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    opts = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    cfg = dict(vocab=64, dim=32, heads=2, hidden=64)

    torch.manual_seed(0)
    eager = Block(**cfg).to(device)
    ours = copy.deepcopy(eager)
    jitted = fuser.jit(ours)
    sizes = [(2, 8), (3, 12), (2, 16)]  # new batch and sequence lengths reuse the program

    eager_losses = train(eager, opts.steps, sizes, cfg, device)
    fuser_losses = train(jitted, opts.steps, sizes, cfg, device)
    print(f"== {opts.steps} AdamW steps on {device}, batches {sizes} ==")
    print("step   eager loss   fuser.jit loss")
    for k, (e, f) in enumerate(zip(eager_losses, fuser_losses)):
        print(f"{k:4d}   {e:10.5f}   {f:14.5f}")
        assert abs(e - f) <= 1e-3 * max(1.0, abs(e)), f"step {k}: {e} vs {f}"
    print(f"\n{jitted.cache_info()}")
    drift = max(abs(p.detach() - q.detach()).max().item()
                for p, q in zip(eager.parameters(), ours.parameters()))
    print(f"largest parameter difference after training: {drift:.2e}")

    if not cuda:
        print("\n(no GPU: step times against eager and torch.compile are printed on a CUDA machine)")
        return
    print("\n== training step time on the GPU (bf16 weights, batch 8 x 1024) ==")
    big = dict(vocab=32000, dim=1024, heads=8, hidden=2816)
    torch.manual_seed(0)
    base = Block(**big).to(device, torch.bfloat16)
    contenders = {"eager": copy.deepcopy(base), "torch.compile": torch.compile(copy.deepcopy(base), dynamic=True),
                  "fuser.jit": fuser.jit(copy.deepcopy(base))}
    times = {k: step_time(m, big, device, 8, 1024) for k, m in contenders.items()}
    print("  ".join(f"{k} {v:.2f} ms" for k, v in times.items()))
    print(f"fuser vs eager {times['eager'] / times['fuser.jit']:.2f}x, "
          f"vs torch.compile {times['torch.compile'] / times['fuser.jit']:.2f}x")


if __name__ == "__main__":
    main()
