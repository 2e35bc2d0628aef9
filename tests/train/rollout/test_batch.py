"""``Rollout``'s pending policy pass: filled by the caller's own forward, row slice by row
slice, or run on demand; either way the same numbers, masked like the engine's."""

from __future__ import annotations

import pytest
import torch

from bestk.train.rollout.batch import Rollout, concat_rollouts


def _pending(seed: int = 0, B: int = 4, T: int = 5) -> tuple[Rollout, list[int],
                                                            tuple[torch.Tensor, torch.Tensor]]:
    """A rollout whose policy pass is pending, the pass's call log, and what the pass gives."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 3:] = 0
    mask[3, 1:] = 0
    truth = (-torch.rand(B, T, generator=g), torch.rand(B, T, generator=g))
    calls: list[int] = []

    def policy_pass() -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(1)
        return truth[0].clone(), truth[1].clone()

    ro = Rollout(torch.zeros(B, 2, dtype=torch.long), torch.ones(B, 2, dtype=torch.long),
                 torch.zeros(B, T, dtype=torch.long), mask, [""] * B,
                 -torch.rand(B, T, generator=g) * mask, torch.zeros(B, T),
                 torch.ones(B, dtype=torch.bool), pending_policy=policy_pass)
    return ro, calls, truth


def test_resolving_runs_the_pass_once_and_masks_it():
    ro, calls, (lp, ent) = _pending()
    assert ro.policy_logprobs is None
    ro.resolve_policy()
    ro.resolve_policy()
    m = ro.completion_mask.float()
    assert calls == [1] and ro.pending_policy is None
    assert torch.equal(ro.policy_logprobs, lp * m) and torch.equal(ro.entropy, ent * m)
    assert ro.metrics["time/logprobs_s"] >= 0


def test_filling_every_row_by_slices_equals_the_pass_and_runs_nothing():
    ro, calls, (lp, ent) = _pending()
    ref, _, _ = _pending()
    ref.resolve_policy()
    ro.fill_policy(slice(0, 3), lp[:3].requires_grad_(), ent[:3])
    assert ro.pending_policy is not None  # row 3 still missing
    ro.fill_policy(slice(3, 4), lp[3:], ent[3:])
    assert ro.pending_policy is None and calls == []
    assert not ro.policy_logprobs.requires_grad
    assert torch.equal(ro.policy_logprobs, ref.policy_logprobs)
    assert torch.equal(ro.entropy, ref.entropy)
    assert "time/logprobs_s" not in ro.metrics  # the caller's forward paid for it


def test_fill_refuses_a_rollout_without_a_pending_pass_and_wrong_shapes():
    ro, _, (lp, ent) = _pending()
    with pytest.raises(ValueError, match=r"rows slice\(0, 2, None\) take \(2, 5\)"):
        ro.fill_policy(slice(0, 2), lp[:3], ent[:3])
    with pytest.raises(ValueError, match="take"):
        ro.fill_policy(slice(0, 2), lp[:2], ent[:2, :4])
    ro.resolve_policy()
    with pytest.raises(ValueError, match="no pending policy pass"):
        ro.fill_policy(slice(0, 2), lp[:2], ent[:2])


def test_concatenation_runs_the_parts_pending_passes():
    a, calls_a, (lp, _) = _pending(0)
    b, calls_b, _ = _pending(1)
    both = concat_rollouts([a, b], pad_id=0)
    assert calls_a == calls_b == [1] and both.pending_policy is None
    assert torch.equal(both.policy_logprobs[:4], lp * a.completion_mask)


def test_entropy_of_some_rows_runs_the_row_pass_only_and_resolves_nothing():
    ro, calls, (lp, ent) = _pending()
    asked: list[tuple[list[int], int]] = []

    def rows_pass(index, group):
        asked.append((index.tolist(), group))
        return lp[index], ent[index]

    ro.pending_policy_rows = rows_pass
    got = ro.policy_entropy_of(torch.tensor([0, 2]), 1)
    m = ro.completion_mask.float()
    assert torch.equal(got, (ent * m)[[0, 2]]) and asked == [([0, 2], 1)] and calls == []
    assert ro.pending_policy is not None and ro.metrics["time/logprobs_s"] >= 0
    # without a row pass, the whole pass runs once and the stored rows are returned
    ro2, calls2, _ = _pending()
    assert torch.equal(ro2.policy_entropy_of(torch.tensor([1, 3]), 2), (ent * m)[[1, 3]])
    assert calls2 == [1] and ro2.pending_policy is None
    with pytest.raises(ValueError, match="whole groups of 2"):
        ro2.policy_entropy_of(torch.tensor([0, 1, 2]), 2)
