"""Unscorable, not fatal: the policy that turns a lost worker into TRL's ``None`` reward, with a budget.

TRL 1.16 treats a completion for which every reward function returned ``None`` as unscorable: it
is left out of its group's baseline and its advantage is forced to 0 (``GRPOTrainer`` around
``unscorable_mask``). So a completion whose sandbox was lost can be *masked* instead of ending
the run, and it never becomes a number. The budget keeps masking for what it is meant for
(sandboxes silently lost on a few percent of runs): once too much is masked, the failure is the
infrastructure's, and it raises as before.

Shared by the reward pool and the episode; pure, no SDK.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from pytest_e2b_env.errors import ConfigError, InfrastructureError

POLICIES = ("raise", "mask")
DEFAULT_MASK_BUDGET = 0.05
DEFAULT_MASK_CONSECUTIVE = 8


def check_policy(on_infrastructure: str, mask_budget: float, mask_consecutive: int) -> None:
    """:class:`ConfigError` naming the bad value and the fix."""
    if on_infrastructure not in POLICIES:
        raise ConfigError(
            f"on_infrastructure={on_infrastructure!r} is not one of {', '.join(POLICIES)}; "
            "use 'mask' to return None for completions the infrastructure lost"
        )
    if isinstance(mask_budget, bool) or not isinstance(mask_budget, int | float) or not 0 <= mask_budget <= 1:
        raise ConfigError(f"mask_budget={mask_budget!r} must be a fraction in [0, 1], e.g. 0.05")
    if isinstance(mask_consecutive, bool) or not isinstance(mask_consecutive, int) or mask_consecutive < 1:
        raise ConfigError(f"mask_consecutive={mask_consecutive!r} must be an integer >= 1, e.g. 8")


@dataclass
class MaskBudget:
    """How much may be masked: a fraction of everything scored so far, and a run of masked in a row.

    ``fraction`` applies to every completion seen by this budget's owner (one pool, one episode
    class), this batch included, and never allows fewer than one masked completion: a per-batch
    share would forbid masking outright in small batches (5 % of 4 is 0), while a run-level share
    matches what it guards against, a loss rate of a few percent. ``consecutive`` masked
    completions in a row (in completion order, across batches) mean the backend is down, not
    losing the odd sandbox. Exceeding either raises :class:`InfrastructureError`.
    """

    fraction: float = DEFAULT_MASK_BUDGET
    consecutive: int = DEFAULT_MASK_CONSECUTIVE
    seen: int = 0
    masked: int = 0
    run: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def allowed(self, seen: int) -> int:
        """Masked completions allowed among ``seen``."""
        return max(1, math.floor(self.fraction * seen + 1e-9))

    def admit(self, masked: Sequence[bool], where: str) -> None:
        """Account for one batch (``masked[i]``: completion i is masked), or raise when over budget.

        Nothing is counted when the batch is refused: it produced no scores at all.
        """
        with self._lock:
            seen = self.seen + len(masked)
            total = self.masked + sum(masked)
            run, longest = self.run, 0
            for flag in masked:
                run = run + 1 if flag else 0
                longest = max(longest, run)
            if total > self.allowed(seen):
                raise InfrastructureError(
                    f"{where}: {total} of {seen} completions masked for infrastructure failures, over "
                    f"the budget of {self.allowed(seen)} (mask_budget={self.fraction:g}); the "
                    "infrastructure is failing, not losing the odd sandbox"
                )
            if longest >= self.consecutive:
                raise InfrastructureError(
                    f"{where}: {longest} completions in a row masked for infrastructure failures "
                    f"(mask_consecutive={self.consecutive}); the backend looks down"
                )
            self.seen, self.masked, self.run = seen, total, run

    def as_dict(self) -> dict[str, float | int]:
        """Counts for metrics: ``masked``, ``masked_fraction`` and the limits."""
        return {
            "masked": self.masked,
            "masked_fraction": round(self.masked / self.seen, 6) if self.seen else 0.0,
            "mask_budget": self.fraction,
            "mask_consecutive": self.consecutive,
        }
