"""Where chunked log-probs pay: the update's token log-probs and entropies from ``(B, T, V)``
logits, the whole tensor in float32 (``loss.chunked_logprobs: false``) against chunk by chunk
(``true``, :func:`bestk.losses.chunked_token_logprobs`), for a range of vocabulary sizes ``V``,
side by side in one process. This sets ``loss.chunked_logprobs: auto``'s threshold
(:data:`bestk.train.config.CHUNKED_FROM_VOCAB`).

Each variant runs the forward (log-probs of given tokens and the token entropies at temperature
0.7), a loss summing both, and the backward pass into the logits, on the same random logits of
``--dtype`` (bfloat16: a bfloat16 model's; float32: a float32 model's). Per round each variant
runs once; reported: the median process CPU time over ``--rounds`` rounds after one warm-up,
and chunked's speed-up over whole; the last line is JSON.

    python benchmarks/chunked_vocab.py                         # bfloat16, V = 64 .. 49152
    python benchmarks/chunked_vocab.py --dtype float32
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from bestk.losses import chunked_token_logprobs, entropy_from_logits, token_logprobs

VOCABS = (64, 512, 2048, 8192, 16384, 32768, 49152)


def _whole(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    z = logits.float() / 0.7
    return token_logprobs(z, tokens).sum() + entropy_from_logits(z).sum()


def _chunked(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    lp, ent = chunked_token_logprobs(logits, tokens, temperature=0.7, with_entropy=True)
    assert ent is not None
    return lp.sum() + ent.sum()


def _time(fn, logits: torch.Tensor, tokens: torch.Tensor) -> float:
    x = logits.detach().clone().requires_grad_(True)
    t0 = time.process_time()
    fn(x, tokens).backward()
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=128, help="completions (B)")
    ap.add_argument("--tokens", type=int, default=32, help="tokens per completion (T)")
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--vocabs", default=",".join(map(str, VOCABS)))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    rows = []
    print(f"token log-probs + entropies, forward and backward, {args.rows} x {args.tokens} "
          f"positions, {args.dtype} logits, {args.threads} thread(s), cpu time, median of "
          f"{args.rounds}")
    for V in (int(v) for v in args.vocabs.split(",")):
        g = torch.Generator().manual_seed(V)
        logits = (3 * torch.randn(args.rows, args.tokens, V, generator=g)).to(dtype)
        tokens = torch.randint(0, V, (args.rows, args.tokens), generator=g)
        times: dict[str, list[float]] = {"whole": [], "chunked": []}
        for r in range(args.rounds + 1):
            order = [("whole", _whole), ("chunked", _chunked)][:: 1 if r % 2 else -1]
            for name, fn in order:
                t = _time(fn, logits, tokens)
                if r:
                    times[name].append(t)
        w, c = statistics.median(times["whole"]), statistics.median(times["chunked"])
        rows.append({"vocab": V, "whole_s": w, "chunked_s": c, "speedup": w / c})
        print(f"  V={V:>6}  whole {w:8.4f} s  chunked {c:8.4f} s  x{w / c:.2f}")
    print(json.dumps({"dtype": args.dtype, "rows": args.rows, "tokens": args.tokens,
                      "threads": args.threads, "results": rows}))


if __name__ == "__main__":
    main()
