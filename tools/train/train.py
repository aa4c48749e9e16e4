#!/usr/bin/python3
"""Train seqkv's default model (see model.py) on the prepared KJV text.

Data: work/train.txt and work/heldout.txt (prepare_data.py), tokenized whole
with work/tokenizer.model (train_tokenizer.py) into one token stream each.

Each training sequence is a window of the training stream at a uniformly
random start s: inputs  [BOS, t[s+1], ..., t[s+L-1]]  and targets
t[s+1 .. s+L], L = 1024.  The first token is replaced by BOS exactly as
llama.cpp's perplexity tool does for each chunk, so the model always sees BOS
at position 0 followed by text that may start anywhere.

Optimiser: AdamW (betas 0.9/0.95, weight decay on matrices only), linear
warm-up then cosine decay to lr_min, gradient clipping at 1.0.  Everything is
seeded; with the same thread count the run is repeatable.

Pack mode (the GPU model, issue 47): --pack DIR reads build_corpus.py's
packed streams instead (train.u16.xz; heldout-SRC.u16.xz per source), the
vocabulary size from its manifest; --tokens N fixes the token budget (steps =
N / (batch x seq_len)); --out-dir holds train.log, ckpt.pt and results.json
(the final held-out loss per source).  On CUDA: bf16 autocast, TF32 matmuls,
fused AdamW, flash attention (model.py) and torch.compile when this PyTorch
has it (Debian's 1.13 does not: the run says so and goes on uncompiled).
--preset gpu30m / tiny set the model shape (below); explicit flags override.

Usage:
  train.py --trial            time a few steps and print tokens/s
  train.py [--steps N] ...    full run; logs to work/train.log, saves work/ckpt.pt
  train.py --pack DIR --out-dir D --preset gpu30m --tokens N [--time-budget-min M]
"""
import argparse
import json
import math
import os
import sys
import time

# Idle OpenMP threads sleep instead of spinning: on this shared 2-core machine
# a spinning worker steals the core that the other thread (or a colleague)
# needs.  Must be set before torch loads libgomp.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from model import Config, Llama  # noqa: E402

BOS = 1
# Model shapes: (dim, layers, heads, kv_heads, hidden).  head_dim 64 in both.
PRESETS = {
    # 8 x (attention 655,360 + SwiGLU 2,162,688) + embedding 16384 x 512 tied
    # = 22,544,384 + 8,388,608 + norms 8,704 = 30,941,696 parameters.
    "gpu30m": (512, 8, 8, 2, 1408),
    # For the CPU end-to-end test of scripts/train_gpu.sh.
    "tiny": (128, 2, 2, 1, 256),
    "kjv4m": (256, 4, 4, 2, 768),
}


def read_pack(pack):
    """-> (manifest, train ids, {source: held-out ids}) from build_corpus.py's pack."""
    from build_corpus import read_u16_xz
    with open(os.path.join(pack, "manifest.json"), encoding="utf-8") as f:
        man = json.load(f)
    train = read_u16_xz(os.path.join(pack, "train.u16.xz")).astype(np.int64)
    held = {}
    for src in sorted(man["sources"]):
        held[src] = read_u16_xz(os.path.join(pack, "heldout-%s.u16.xz" % src)).astype(np.int64)
    if int(train.max()) >= man["vocab_size"]:
        sys.exit("train: token id %d outside the vocabulary" % int(train.max()))
    return man, train, held


def tokenize_file(work, name):
    """Token ids of work/<name>.txt, cached as work/<name>.u16."""
    import sentencepiece as spm
    cache = os.path.join(work, name + ".u16")
    src = os.path.join(work, name + ".txt")
    spm_model = os.path.join(work, "tokenizer.model")
    if os.path.exists(cache) and os.path.getmtime(cache) >= max(
            os.path.getmtime(src), os.path.getmtime(spm_model)):
        return np.fromfile(cache, dtype="<u2").astype(np.int64)
    sp = spm.SentencePieceProcessor(model_file=spm_model)
    with open(src, encoding="ascii") as f:
        ids = sp.encode(f.read())
    arr = np.asarray(ids, dtype="<u2")
    arr.tofile(cache)
    return arr.astype(np.int64)


def get_batch(data, rng, batch, seq_len):
    starts = rng.integers(0, len(data) - seq_len - 1, size=batch)
    if torch.is_tensor(data):   # the stream already on the device: gather there
        idx = torch.from_numpy(starts).to(data.device)[:, None] + torch.arange(
            seq_len + 1, device=data.device)[None, :]
        w = data[idx]
        x, y = w[:, :-1].clone(), w[:, 1:]
        x[:, 0] = BOS
        return x, y
    x = np.stack([data[s:s + seq_len] for s in starts])
    y = np.stack([data[s + 1:s + seq_len + 1] for s in starts])
    x[:, 0] = BOS
    return torch.from_numpy(x), torch.from_numpy(y)


@torch.no_grad()
def heldout_loss(model, data, seq_len, batch=4, device="cpu", autocast=None):
    """Mean next-token cross-entropy (nats) over non-overlapping windows of
    the held-out stream, BOS first, every position scored."""
    model.eval()
    if len(data) < 2:
        raise ValueError("held-out stream of %d tokens: nothing to score" % len(data))
    seq_len = min(seq_len, len(data) - 1)   # a stream shorter than one window: one window
    n_chunks = (len(data) - 1) // seq_len
    tot, cnt = 0.0, 0
    for c0 in range(0, n_chunks, batch):
        cs = range(c0, min(n_chunks, c0 + batch))
        x = np.stack([data[c * seq_len:(c + 1) * seq_len] for c in cs])
        y = np.stack([data[c * seq_len + 1:(c + 1) * seq_len + 1] for c in cs])
        x[:, 0] = BOS
        with autocast() if autocast else _null():
            logits = model(torch.from_numpy(x).to(device))
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), torch.from_numpy(y).reshape(-1).to(device),
            reduction="sum")
        tot += loss.item()
        cnt += y.size
    model.train()
    return tot / cnt


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def progress(step, elapsed, args):
    """Fraction of the run done: by steps, or by wall-clock time when a time
    budget is set and the machine is slower than planned (the cosine then
    still ends at lr_min, within the budget)."""
    p = step / args.steps
    if args.time_budget_min > 0:
        p = max(p, elapsed / (60.0 * args.time_budget_min))
    return p


def lr_at(step, p, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    p0 = args.warmup / args.steps
    p = (p - p0) / max(1e-9, 1.0 - p0)
    return args.lr_min + 0.5 * (args.lr - args.lr_min) * (1.0 + math.cos(math.pi * min(1.0, p)))


def make_optimizer(model, args, cuda=False):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.wd},
              {"params": no_decay, "weight_decay": 0.0}]
    if cuda:
        try:
            return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
        except (TypeError, RuntimeError):
            pass
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.path.join(HERE, "work"))
    ap.add_argument("--pack", default=None, help="build_corpus.py's pack (GPU model)")
    ap.add_argument("--out-dir", default=None, help="log, checkpoint, results (default WORK)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default=None)
    ap.add_argument("--tokens", type=int, default=0, help="token budget: sets --steps")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--lr-min", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--time-budget-min", type=float, default=0.0,
                    help="end the schedule early if the loop runs longer than this")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-max-tokens", type=int, default=0,
                    help="score at most this many held-out tokens per source (0: all)")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dim", type=int, default=None)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--heads", type=int, default=None)
    ap.add_argument("--kv-heads", type=int, default=None)
    ap.add_argument("--hidden", type=int, default=None)
    ap.add_argument("--trial", action="store_true", help="time 6 steps, then exit")
    args = ap.parse_args()
    shape = PRESETS[args.preset or "kjv4m"]
    for name, v in zip(("dim", "layers", "heads", "kv_heads", "hidden"), shape):
        if getattr(args, name) is None:
            setattr(args, name, v)
    if args.tokens:
        args.steps = max(1, -(-args.tokens // (args.batch * args.seq_len)))
    out_dir = args.out_dir or args.work
    os.makedirs(out_dir, exist_ok=True)

    dev = args.device
    if dev == "auto":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
    cuda = dev.startswith("cuda")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    if args.pack:
        man, train, held_by_src = read_pack(args.pack)
        vocab = man["vocab_size"]
    else:
        import sentencepiece as spm
        vocab = spm.SentencePieceProcessor(
            model_file=os.path.join(args.work, "tokenizer.model")).get_piece_size()
        train = tokenize_file(args.work, "train")
        held_by_src = {"kjv": tokenize_file(args.work, "heldout")}
    cfg = Config(vocab_size=vocab, dim=args.dim, n_layers=args.layers, n_heads=args.heads,
                 n_kv_heads=args.kv_heads, hidden_dim=args.hidden, max_seq_len=args.seq_len)
    model = Llama(cfg).to(dev)
    autocast = None
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        autocast = lambda: torch.autocast("cuda", dtype=torch.bfloat16)  # noqa: E731
        train = torch.from_numpy(train).to(dev)
    fwd = model
    compiled = "no (CPU run)" if not cuda else "no (--no-compile)"
    if cuda and not args.no_compile:
        if hasattr(torch, "compile"):
            fwd = torch.compile(model)
            compiled = "yes (torch %s)" % torch.__version__
        else:
            compiled = "no (torch %s has no torch.compile)" % torch.__version__
    opt = make_optimizer(model, args, cuda)
    tok_per_step = args.batch * args.seq_len

    def loss_of(x, y):
        with autocast() if autocast else _null():
            logits = fwd(x)
        return torch.nn.functional.cross_entropy(logits.float().view(-1, vocab), y.reshape(-1))

    if args.trial:
        times = []
        for step in range(6):
            t0 = time.time()
            x, y = get_batch(train, rng, args.batch, args.seq_len)
            loss = loss_of(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if cuda:
                torch.cuda.synchronize()
            times.append(time.time() - t0)
            print("trial step %d loss %.3f %.2fs" % (step, loss.item(), times[-1]), flush=True)
        dt = sum(times[1:]) / len(times[1:])
        print("trial: params %d, %d tokens/step, %.2f s/step, %.0f tokens/s"
              % (model.n_params(), tok_per_step, dt, tok_per_step / dt))
        return

    log = open(os.path.join(out_dir, "train.log"), "a", buffering=1)

    def say(msg):
        print(msg, flush=True)
        log.write(msg + "\n")

    def evaluate():
        res = {}
        t_eval = time.time()
        for src, data in held_by_src.items():
            if args.eval_max_tokens:
                data = data[:args.eval_max_tokens + 1]
            hl = heldout_loss(model, data, args.seq_len, 4, dev, autocast)
            res[src] = {"loss_nats": hl, "ppl": math.exp(hl), "tokens": int(len(data))}
        n = sum(r["tokens"] for r in res.values())
        mean = sum(r["loss_nats"] * r["tokens"] for r in res.values()) / n
        say("eval step %d heldout loss %.4f nats/token (ppl %.2f, %.3f bits/token) [%.0fs] %s"
            % (step, mean, math.exp(mean), mean / math.log(2), time.time() - t_eval,
               " ".join("%s=%.4f" % (k, r["loss_nats"]) for k, r in res.items())))
        return mean, res

    say("config %s" % json.dumps(cfg.to_dict()))
    say("args %s" % json.dumps(vars(args)))
    say("device %s%s, compiled: %s, autocast: %s, torch %s"
        % (dev, " (%s)" % torch.cuda.get_device_name(0) if cuda else "", compiled,
           "bf16" if cuda else "none (float32)", torch.__version__))
    n_held = sum(len(d) for d in held_by_src.values())
    say("params %d, train tokens %d, heldout tokens %d, %d tokens/step, %d steps (%.2f epochs)"
        % (model.n_params(), len(train), n_held, tok_per_step, args.steps,
           args.steps * tok_per_step / len(train)))
    t_start = time.time()
    tokens_seen = 0
    step = 0
    hl = float("nan")
    while True:
        p = progress(step, time.time() - t_start, args)
        if p >= 1.0:
            break
        lr = lr_at(step, p, args)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = get_batch(train, rng, args.batch, args.seq_len)
        opt.zero_grad(set_to_none=True)
        if step == 0 and fwd is not model:
            # torch.compile fails, if at all, on the first call (no compiler or
            # Triton in the image...): then the run goes on uncompiled.
            try:
                loss = loss_of(x, y)
                loss.backward()
            except Exception as e:  # noqa: BLE001 - any compile failure
                say("compile failed (%s: %s); training uncompiled" % (type(e).__name__, str(e)[:300]))
                compiled = "failed, eager"
                fwd = model
                opt.zero_grad(set_to_none=True)
                loss = loss_of(x, y)
                loss.backward()
        else:
            loss = loss_of(x, y)
            loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tokens_seen += tok_per_step
        step += 1
        el = time.time() - t_start
        if step % 10 == 1:
            say("step %5d/%d loss %.4f lr %.2e gnorm %.2f elapsed %.0fs %.0f tok/s"
                % (step, args.steps, loss.item(), lr, gn.item(), el, tokens_seen / el))
        last = progress(step, time.time() - t_start, args) >= 1.0
        if step % args.eval_every == 0 or last:
            hl, res = evaluate()
            torch.save({"config": cfg.to_dict(), "model": model.state_dict(), "step": step,
                        "args": vars(args), "elapsed_s": time.time() - t_start,
                        "tokens_seen": tokens_seen, "heldout_loss": hl, "heldout": res},
                       os.path.join(out_dir, "ckpt.pt"))
    el = time.time() - t_start
    say("done: %d steps, %d tokens, %.1f min, %.0f tokens/s"
        % (step, tokens_seen, el / 60, tokens_seen / el))
    if step < args.steps:
        say("note: the wall-clock budget (%.1f min) ended the schedule at step %d of %d"
            % (args.time_budget_min, step, args.steps))
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"steps": step, "planned_steps": args.steps, "tokens_seen": tokens_seen,
                   "train_s": el, "params": model.n_params(), "config": cfg.to_dict(),
                   "compiled": compiled, "device": dev, "heldout_loss_nats": hl,
                   "heldout": res}, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
