"""Worker of ``tests/integrations/test_trl.py``: one rank of a real 2-process
``BestkGRPOTrainer`` run (``torchrun --nproc_per_node 2``, ``use_cpu=True``: gloo on CPU).

Each rank trains 2 steps and writes ``OUT/rank<r>.json``: its world size and index, and per
generation batch the rewards its reward function computed locally, its prompt ids, the gathered
rewards and advantages bestk computed, the local slice returned to TRL and the advantages TRL's
loss received.

    torchrun --nproc_per_node 2 tests/_trl_two_ranks.py OUT
"""

from __future__ import annotations

import json
import os
import sys

import torch

N = 4  # num_generations
PER_DEVICE = 6  # completions per rank per step: 12 in all, 3 groups, one split across ranks
ROWS = [{"prompt": p, "pid": f"p-{p}"} for p in ("abc", "hex", "gaze", "bad", "fade", "cab")]


def main(out: str) -> None:
    from datasets import Dataset

    from bestk.integrations.trl import BestkGRPOTrainer
    from tests._trl_tiny import grpo_config, tiny_policy

    model, tok = tiny_policy()
    local_rewards: list[list[float]] = []

    def graded(completions, **_):
        r = [(c.count("a") + len(c) % 3) / 4 for c in completions]
        local_rewards.append(r)
        return r

    record: dict = {"steps": [], "trained": []}

    class Probe(BestkGRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            pids = [x["pid"] for x in inputs]
            res = super()._generate_and_score_completions(inputs)
            record["steps"].append(
                {
                    "pids": pids,
                    "local_rewards": local_rewards[-1],
                    "gathered_rewards": self.last_rewards.tolist(),
                    "gathered_advantages": self.last_advantages.tolist(),
                    "local_advantages": res["advantages"].detach().cpu().tolist(),
                }
            )
            return res

        def compute_loss(self, model, inputs, *a, **kw):
            record["trained"].append(inputs["advantages"].detach().cpu().tolist())
            return super().compute_loss(model, inputs, *a, **kw)

    args = grpo_config(
        os.path.join(out, "trainer"), per_device_train_batch_size=PER_DEVICE, num_generations=N,
        ddp_backend="gloo",
    )
    trainer = Probe(
        model=model,
        reward_funcs=[graded],
        args=args,
        train_dataset=Dataset.from_list(ROWS),
        processing_class=tok,
        estimator="argmaxrl",
        prompt_id_column="pid",
    )
    trainer.train()
    acc = trainer.accelerator
    record.update(
        world_size=acc.num_processes,
        process_index=acc.process_index,
        distributed_type=str(acc.distributed_type),
        torch_world_size=torch.distributed.get_world_size()
        if torch.distributed.is_initialized()
        else 1,
    )
    with open(os.path.join(out, f"rank{acc.process_index}.json"), "w") as f:
        json.dump(record, f)
    if torch.distributed.is_initialized():  # a clean teardown: a rank left with live gloo
        torch.distributed.barrier()          # threads at exit can abort ("terminate called
        torch.distributed.destroy_process_group()  # without an active exception")


if __name__ == "__main__":
    main(sys.argv[1])
