"""How a training batch's rows are split into micro-batches (one forward/backward each).

Fixed: `micro_batch_size` rows each. By token count (`trainer.use_dynamic_bsz`): consecutive rows
as long as the micro-batch's padded size, rows × (longest prompt + longest response), stays within
`max_tokens` (`trainer.max_token_len_per_gpu`); a row longer than that alone is a micro-batch of
its own. Either way the micro-batches are consecutive runs of rows in batch order, and each
micro-batch's loss is weighted by its share of the whole batch, so the split changes memory and
step time, never the loss or its gradient. A loss over adjacent pairs of rows (dpo) splits by
units of two rows (`unit`): a token budget never cuts a pair.
"""

from __future__ import annotations

from collections.abc import Sequence


def micro_batches(
    prompt_lengths: Sequence[int],
    response_lengths: Sequence[int],
    micro_batch_size: int,
    max_tokens: int | None = None,
    unit: int = 1,
) -> list[list[int]]:
    """Row indices of each micro-batch, in order: fixed-size groups when `max_tokens` is None,
    else groups by padded token count, cut only between units of `unit` rows."""
    rows = len(prompt_lengths)
    if max_tokens is None:
        return [
            list(range(lo, min(lo + micro_batch_size, rows)))
            for lo in range(0, rows, micro_batch_size)
        ]
    groups: list[list[int]] = []
    current: list[int] = []
    longest_prompt = longest_response = 0
    for start in range(0, rows, unit):
        members = range(start, min(start + unit, rows))
        own_p = max(int(prompt_lengths[i]) for i in members)
        own_r = max(int(response_lengths[i]) for i in members)
        p, r = max(longest_prompt, own_p), max(longest_response, own_r)
        if current and (len(current) + len(members)) * (p + r) > max_tokens:
            groups.append(current)
            current, p, r = [], own_p, own_r
        current.extend(members)
        longest_prompt, longest_response = p, r
    if current:
        groups.append(current)
    return groups
