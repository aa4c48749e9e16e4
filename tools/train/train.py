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

Usage:
  train.py --trial            time a few steps and print tokens/s
  train.py [--steps N] ...    full run; logs to work/train.log, saves work/ckpt.pt
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
    x = np.stack([data[s:s + seq_len] for s in starts])
    y = np.stack([data[s + 1:s + seq_len + 1] for s in starts])
    x[:, 0] = BOS
    return torch.from_numpy(x), torch.from_numpy(y)


@torch.no_grad()
def heldout_loss(model, data, seq_len, batch=4):
    """Mean next-token cross-entropy (nats) over non-overlapping windows of
    the held-out stream, BOS first, every position scored."""
    model.eval()
    n_chunks = (len(data) - 1) // seq_len
    tot, cnt = 0.0, 0
    for c0 in range(0, n_chunks, batch):
        cs = range(c0, min(n_chunks, c0 + batch))
        x = np.stack([data[c * seq_len:(c + 1) * seq_len] for c in cs])
        y = np.stack([data[c * seq_len + 1:(c + 1) * seq_len + 1] for c in cs])
        x[:, 0] = BOS
        logits = model(torch.from_numpy(x))
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), torch.from_numpy(y).reshape(-1),
            reduction="sum")
        tot += loss.item()
        cnt += y.size
    model.train()
    return tot / cnt


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


def make_optimizer(model, args):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.wd},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.path.join(HERE, "work"))
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
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--trial", action="store_true", help="time 6 steps, then exit")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    import sentencepiece as spm
    vocab = spm.SentencePieceProcessor(
        model_file=os.path.join(args.work, "tokenizer.model")).get_piece_size()
    cfg = Config(vocab_size=vocab, dim=args.dim, n_layers=args.layers, n_heads=args.heads,
                 n_kv_heads=args.kv_heads, hidden_dim=args.hidden, max_seq_len=args.seq_len)
    model = Llama(cfg)
    train = tokenize_file(args.work, "train")
    held = tokenize_file(args.work, "heldout")
    opt = make_optimizer(model, args)
    tok_per_step = args.batch * args.seq_len

    if args.trial:
        times = []
        for step in range(6):
            t0 = time.time()
            x, y = get_batch(train, rng, args.batch, args.seq_len)
            loss = torch.nn.functional.cross_entropy(model(x).view(-1, vocab), y.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            times.append(time.time() - t0)
            print("trial step %d loss %.3f %.2fs" % (step, loss.item(), times[-1]), flush=True)
        dt = sum(times[1:]) / len(times[1:])
        print("trial: params %d, %d tokens/step, %.2f s/step, %.0f tokens/s"
              % (model.n_params(), tok_per_step, dt, tok_per_step / dt))
        return

    log = open(os.path.join(args.work, "train.log"), "a", buffering=1)

    def say(msg):
        print(msg, flush=True)
        log.write(msg + "\n")

    say("config %s" % json.dumps(cfg.to_dict()))
    say("args %s" % json.dumps(vars(args)))
    say("params %d, train tokens %d, heldout tokens %d, %d tokens/step, %d steps (%.2f epochs)"
        % (model.n_params(), len(train), len(held), tok_per_step, args.steps,
           args.steps * tok_per_step / len(train)))
    t_start = time.time()
    tokens_seen = 0
    step = 0
    while True:
        p = progress(step, time.time() - t_start, args)
        if p >= 1.0:
            break
        lr = lr_at(step, p, args)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = get_batch(train, rng, args.batch, args.seq_len)
        loss = torch.nn.functional.cross_entropy(model(x).view(-1, vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
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
            t_eval = time.time()
            hl = heldout_loss(model, held, args.seq_len)
            say("eval step %d heldout loss %.4f nats/token (ppl %.2f, %.3f bits/token) [%.0fs]"
                % (step, hl, math.exp(hl), hl / math.log(2), time.time() - t_eval))
            torch.save({"config": cfg.to_dict(), "model": model.state_dict(), "step": step,
                        "args": vars(args), "elapsed_s": time.time() - t_start,
                        "tokens_seen": tokens_seen, "heldout_loss": hl},
                       os.path.join(args.work, "ckpt.pt"))
    el = time.time() - t_start
    say("done: %d steps, %d tokens, %.1f min, %.0f tokens/s"
        % (step, tokens_seen, el / 60, tokens_seen / el))


if __name__ == "__main__":
    main()
