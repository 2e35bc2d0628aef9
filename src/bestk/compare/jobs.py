"""The jobs of a grid (module-level functions: they run in worker processes): a seed's SFT
warm-up (and KAPPO calibration), a shared reference bank, one RL run; and :func:`execute`, which
runs them in order in this process or a pool of single-threaded workers. A job runs the
trainer's public steps (:mod:`bestk.train.steps`) and :class:`~bestk.train.trainer.Trainer`,
and keeps what a comparison caches and records around them (keys, ``result.json``).

**Ctrl-C and SIGTERM.** A comparison runs under :func:`stop_on_signals`: the first Ctrl-C or
SIGTERM stops every job at its next safe point (an SFT step, a bank or evaluation batch, the
end of an RL step, which is checkpointed; in a worker process, through the pool's stop event),
no new job starts, and :class:`CompareInterrupted` (a ``KeyboardInterrupt``) carries the exit
status, 130 or 143 (128 + SIGTERM); a second one aborts at once. Running the same comparison
again skips the finished runs and continues an interrupted one from its checkpoint.
"""

from __future__ import annotations

import copy
import json
import multiprocessing as mp
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypedDict

import torch
from rich.progress import Progress

from bestk._atomic import write_text_atomic
from bestk._optional import require
from bestk.compare.directory import set_run_aside
from bestk.compare.keys import (
    fingerprint,
    sft_key,
)
from bestk.compare.methods import (
    KappoAuto,
)
from bestk.train.config import ResolvedTrainConfig
from bestk.train.config.io import resolved_from_dict
from bestk.train.steps import (
    Stopped,
    StopRequest,
    bank_complete,
    load_weights,
    reference_bank,
    resumable,
    sampled_calibration,
    save_weights,
    sft_weights,
)
from bestk.train.trainer import Trainer

#: What an interrupted run of a comparison says continues it (:attr:`Trainer.continue_with`).
CONTINUE_WITH = "the same `bestk compare` command"


class CompareInterrupted(KeyboardInterrupt):
    """A comparison stopped by Ctrl-C or SIGTERM (module docstring): ``status`` is the exit
    status (130, or 143 after SIGTERM); ``aborted``: by a second one, at once (the last
    checkpoints are intact), rather than at the jobs' next safe point."""

    def __init__(self, status: int, aborted: bool = False):
        super().__init__(status, aborted)
        self.status, self.aborted = status, aborted

    def __str__(self) -> str:
        how = ("aborted; the last checkpoints are intact" if self.aborted else
               "interrupted: the finished runs are kept, an interrupted run continues from its "
               "last checkpoint")
        return f"{how}; run the same `bestk compare` command to continue"


#: This process's stop request while a comparison runs here (:func:`stop_on_signals`), and in
#: a worker process the pool's stop event (:func:`_worker_init`).
_requests: list[StopRequest] = []
_event: Any = None
#: A worker's job is running (:func:`_job`); how long a worker whose main process died lets
#: its job run on to its next safe point before it ends (:func:`_watch_parent`).
_busy = threading.Event()
ORPHAN_GRACE = 120.0


def stop_requested() -> bool:
    """Whether the comparison was asked to stop (what the jobs poll between steps)."""
    return any(r.requested for r in _requests) or (_event is not None and _event.is_set())


def _signum() -> int | None:
    """The signal that asked this process's comparison to stop (``None``: none, or the pool's
    stop event)."""
    return next((r.signum for r in _requests if r.signum is not None), None)


def _status() -> int:
    """The exit status of the stop: 128 + the signal (130 without one)."""
    return 128 + (_signum() or signal.SIGINT)


@contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """Ctrl-C / SIGTERM handling of a comparison (module docstring): jobs poll
    :func:`stop_requested`; a second signal's ``KeyboardInterrupt`` becomes an aborted
    :class:`CompareInterrupted` with the first signal's exit status."""
    with StopRequest() as stop:
        _requests.append(stop)
        try:
            yield stop
        except CompareInterrupted:
            raise
        except KeyboardInterrupt:
            raise CompareInterrupted(_status(), aborted=True) from None
        finally:
            _requests.remove(stop)


def _stopped() -> CompareInterrupted:
    return CompareInterrupted(_status())


class SeedResult(TypedDict):
    """What a comparison keeps of one run (``OUT/results.json``: ``{label: {"seedS": ...}}``):
    its first and last evaluation records (CI bounds dropped) and what it was."""

    start: dict[str, float]
    end: dict[str, float]
    run: dict[str, object]


#: The per-step records of a run's own rollouts kept as its training curve: on-policy samples
#: of training prompts before the step's update, free (no evaluation runs for them):
#: ``success_rate`` (pass@1) and ``group_any_success`` (pass@n, n = ``rollout.n``: a group of
#: n samples has a success), ``reward_mean`` and ``entropy`` (the rollouts' token entropy).
TRAIN_CURVE: tuple[str, ...] = ("success_rate", "group_any_success", "reward_mean", "entropy")


class RunResult(SeedResult):
    """``OUT/<label>/seed<S>/result.json`` (:func:`rl_job`): the method's label, the run's
    key and its training curve (:data:`TRAIN_CURVE`: one value per RL step, from the step's
    own rollouts) besides."""

    label: str
    key: str
    train_curve: dict[str, list[float]]


class KappoFields(TypedDict):
    """The fields of a :class:`~bestk.compare.methods.KappoAuto` as :func:`sft_job` gets them."""

    k: int
    beta: float
    bank_n: int
    kind: str


def sft_job(cfg_dict: Mapping[str, object], path: str, kappo: KappoFields | None,
             cal_path: str | None) -> str:
    """SFT of one seed (saved atomically to ``path``) and, if asked, its KAPPO calibration."""
    cfg = resolved_from_dict(copy.deepcopy(cfg_dict))
    key = sft_key(cfg)
    if not _sft_cached(Path(path), key):
        if cal_path is not None:  # made from the weights this replaces
            Path(cal_path).unlink(missing_ok=True)
        try:
            save_weights(sft_weights(cfg, should_stop=stop_requested), path)
        except Stopped:
            raise _stopped() from None
        write_text_atomic(Path(path + ".json"), json.dumps(key))
    if kappo is not None and cal_path is not None and not Path(cal_path).exists():
        _calibrate(cfg, path, KappoAuto(**kappo), Path(cal_path))
    return path


def _sft_cached(path: Path, key: object) -> bool:
    """Whether ``path`` holds the SFT weights of ``key`` (its key file ``path.json`` says so)
    and they load. Weights of that key that are damaged (truncated, overwritten) are bestk's
    own cache entry: a note on stderr names the file, and the caller recomputes it."""
    meta = path.with_name(path.name + ".json")
    try:
        if not (path.exists() and json.loads(meta.read_text()) == key):
            return False
    except (OSError, ValueError):  # no key file, or one that is not JSON: recomputed
        return False
    try:
        load_weights(path)
    except ValueError as e:
        print(f"note: {e}; recomputing the cached SFT weights", file=sys.stderr, flush=True)
        return False
    return True


def _calibrate(cfg: ResolvedTrainConfig, sft_path: str | None, kp: KappoAuto,
               cal_path: Path) -> None:
    """The calibration of ``kp`` (:func:`~bestk.train.steps.sampled_calibration`: ``bank_n``
    samples of the policy -- ``sft_path``'s weights, else the model as ``cfg`` loads it -- on
    every training prompt) saved atomically to ``cal_path``."""
    try:
        cal = sampled_calibration(cfg, k=kp.k, beta=kp.beta, kind=kp.kind, samples=kp.bank_n,
                                  weights=sft_path, should_stop=stop_requested)
    except Stopped:
        raise _stopped() from None
    cal.save(cal_path)


def calibration_job(cfg_dict: Mapping[str, object], kappo: KappoFields, cal_path: str) -> str:
    """The KAPPO calibration of the policy ``cfg`` loads (its ``model.path``: a warm start
    shared by every seed of a grid), made once into ``cal_path`` (atomically; an existing file
    is kept): ``kappo["bank_n"]`` samples of every training prompt from the run's rollout
    engine (:func:`_calibrate`), calibrated with ``kappo``'s k, beta and kind."""
    if not Path(cal_path).exists():
        cfg = resolved_from_dict(copy.deepcopy(cfg_dict))
        Path(cal_path).parent.mkdir(parents=True, exist_ok=True)
        _calibrate(cfg, None, KappoAuto(**kappo), Path(cal_path))  # saved atomically
    return cal_path


def bank_job(cfg_dict: Mapping[str, object], sft_path: str | None, bank_dir: str, key: str,
              completions: bool) -> str:
    """Sample the reference bank of ``cfg``'s run from the seed's SFT weights once
    (:func:`~bestk.train.steps.reference_bank`: the trainer's own code) into ``bank_dir``
    (``bank.jsonl``, ``bank_tokens.safetensors`` when the run keeps completions, then
    ``calibration.json`` of ``cfg``'s k and beta -- its presence marks a complete bank -- and
    ``bank.key``); a complete bank of ``key`` there is kept."""
    out = Path(bank_dir)
    if bank_complete(out, completions) and (out / "bank.key").exists() and \
            (out / "bank.key").read_text() == key:
        return bank_dir
    cfg = resolved_from_dict(copy.deepcopy(cfg_dict))
    try:
        reference_bank(cfg, out, weights=sft_path, should_stop=stop_requested)
    except Stopped:
        raise _stopped() from None
    write_text_atomic(out / "bank.key", key)
    return bank_dir


def rl_job(cfg_dict: Mapping[str, object], sft_path: str | None, label: str, key: str,
            weights: str | None = None) -> RunResult:
    """One RL run from the seed's SFT weights (resumed from its checkpoint if it has one);
    writes ``result.json`` atomically and returns it. ``key`` identifies the run (its
    configuration and, with SFT, the digest ``weights`` of the SFT weights): a finished result
    or a checkpoint made under another key is not reused."""
    try:
        require("transformers.utils.logging").disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass
    cfg = resolved_from_dict(copy.deepcopy(cfg_dict))
    run_dir = Path(cfg.out)
    result_path = run_dir / "result.json"
    if result_path.exists():
        done = json.loads(result_path.read_text())
        if done.get("key") == key:
            return done
    t0 = time.perf_counter()

    def poll(step: int, metrics: object) -> None:
        """After each RL step: a stop asked of the comparison stops the run here."""
        if stop_requested():
            tr.stop.request(_signum())

    same = (run_dir / "run.key").exists() and (run_dir / "run.key").read_text() == key
    if same and resumable(run_dir):
        tr = Trainer.resume(run_dir, on_step=poll)
    else:  # a run of another key (or none) is kept beside, whole; one of this key starts over
        if not same and run_dir.is_dir() and any(run_dir.iterdir()):
            set_run_aside(run_dir)
        tr = Trainer(cfg, warm_start=sft_path, on_step=poll)
        write_text_atomic(run_dir / "run.key", key)
    tr.continue_with = CONTINUE_WITH
    if stop_requested():
        tr.close()
        raise _stopped()
    try:
        tr.run(progress=False)
    except CompareInterrupted:
        raise
    except KeyboardInterrupt:  # a second Ctrl-C / SIGTERM during the run: aborted at once
        raise CompareInterrupted(tr.stop.exit_status, aborted=True) from None
    if tr.interrupted:
        raise CompareInterrupted(tr.stop.exit_status)
    s = tr.summary()
    evals, trains = s["evaluations"], s["train"]
    keep = [k for k in evals[-1] if not k.endswith(("_lo", "_hi"))]
    run: dict[str, object] = {
        "estimator": s["estimator"],
        "options": s["options"],
        "reward": s["reward"],  # what the method learns from: the 0/1 success, or graded
        # which prompts the run trained on (those RL drew from) and evaluated on
        "prompts": fingerprint({"task": s["task"], "train": s["train_prompt_ids"],
                                "eval": s["eval_prompt_ids"]}),
        "algorithm": s["algorithm"],
        # on-policy completions sampled during RL, plus the reference bank of a calibration
        # made in the run (an offline algorithm such as dpo samples none during RL)
        "rollouts": s["rollouts"],
        "bank": s["bank"],
        "bank_shared": s["bank_shared"],
        "lr": s["lr"],
        "seed": s["seed"],
        "sampling_seed": s["sampling_seed"],
        "reference_weights": weights,  # weights_digest of the SFT warm start (None: none)
        "wall_seconds": time.perf_counter() - t0,
    }
    out: RunResult = {"label": label, "key": key, "run": run,
           "start": {k: evals[0][k] for k in keep if k in evals[0]},
           "end": {k: evals[-1][k] for k in keep},
           "train_curve": {k: [float(r[k]) for r in trains] for k in TRAIN_CURVE
                           if trains and all(k in r for r in trains)}}
    write_text_atomic(result_path, json.dumps(out, indent=1))
    for ck in (run_dir / "checkpoints", run_dir / "final"):
        shutil.rmtree(ck, ignore_errors=True)  # the result is all a comparison keeps
    return out


def execute(jobs: list[tuple], workers: int, progress: bool, what: str,
            isolate: bool = False) -> list[Any]:
    """Run ``(fn, *args)`` jobs in order (in-process for 1 worker, else a process pool of
    single-threaded workers); results in job order. ``isolate``: one job at a time, each in
    a fresh worker process of its own, so that what a job leaves in memory (a vLLM engine,
    the allocator's high-water heap) goes back to the system when it ends. A stop
    (:func:`stop_requested`) starts no further job, reaches the running ones (in the workers
    through the pool's stop event) and raises :class:`CompareInterrupted` once they
    stopped."""
    if not jobs:
        return []
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task(what, total=len(jobs))
        if isolate:
            out = []
            for job in jobs:
                if stop_requested():
                    raise _stopped()
                out.extend(_pool([job], 1, bar, task))
            return out
        if workers <= 1:
            out = []
            for fn, *args in jobs:
                if stop_requested():
                    raise _stopped()
                out.append(fn(*args))
                bar.advance(task)
            return out
        return _pool(jobs, workers, bar, task)


def _pool(jobs: list[tuple], workers: int, bar: Progress, task: Any) -> list[Any]:
    """:func:`execute`'s process pool of ``workers`` single-threaded workers over ``jobs``."""
    ctx = mp.get_context("spawn")
    event = ctx.Event()
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                             initargs=(event,)) as pool:
        futs = [pool.submit(_job, fn, *args) for fn, *args in jobs]
        pending: set[Future[Any]] = set(futs)
        stopped = False
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            for f in done:
                if f.cancelled():
                    continue
                try:
                    f.result()
                except CompareInterrupted:
                    stopped = True
                    continue
                bar.advance(task)
            if (stopped or stop_requested()) and not event.is_set():
                event.set()  # the running jobs stop at their next safe point
                for f in pending:
                    f.cancel()
        if event.is_set():
            raise _stopped()
        return [f.result() for f in futs]


def _worker_init(event: Any = None) -> None:
    """A worker process: one torch thread; Ctrl-C reaches its jobs through the pool's stop
    ``event`` (set by the main process), not from the terminal (a trainer's own handler
    still takes one during a run). A worker whose main process died (``kill -9``, the OOM
    killer) stops too (:func:`_watch_parent`): it was left waiting on the pool forever."""
    global _event
    torch.set_num_threads(1)
    _event = event
    if event is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        threading.Thread(target=_watch_parent, args=(os.getppid(), event), daemon=True,
                         name="bestk-watch-parent").start()


def _watch_parent(parent: int, event: Any, poll: float = 0.5) -> None:
    """Once the main process ``parent`` is gone: ask the running job to stop at its next safe
    point (``event``; its checkpoint stays intact), give it :data:`ORPHAN_GRACE` seconds,
    then end this worker, which nothing would ever give another job."""
    while os.getppid() == parent:
        time.sleep(poll)
    event.set()  # every worker's job stops, as after Ctrl-C
    deadline = time.monotonic() + ORPHAN_GRACE
    while _busy.is_set() and time.monotonic() < deadline:
        time.sleep(poll)
    os._exit(128 + signal.SIGTERM)


def _job(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a worker, marked busy meanwhile (:func:`_watch_parent` waits for it)."""
    _busy.set()
    try:
        return fn(*args)
    finally:
        _busy.clear()
