"""A MIP answer is not HiGHS's word: `certify` recomputes the objective from the solution and
trusts the dual bound only when the report matches; `run_highs` solves with that check (and
solves again cold when a warm-started answer does not check out). Shared by plan and re-plan."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import highspy
import numpy as np

from gpuvalues.planners.mig.milp.highs import Vector, run_once

# run_highs's answer: HiGHS's status and info, the solution (None: none) and its certificate
HighsAnswer = tuple[highspy.HighsModelStatus, highspy.HighsInfo, "Vector | None", "Certificate | None"]


def run_highs(lp: highspy.HighsLp, *, integer: bool, time_limit: float, rel_gap: float = 0.0,
              abs_gap: float = 0.999, start: Vector | None = None, lp_bound: float | None = None
              ) -> HighsAnswer:
    """Solve `lp` with HiGHS, quietly and deterministically (one thread, seed 0), within
    `time_limit`, warm-started from `start` for a MIP: (status, info, solution or None,
    certificate). Shared by the plan and the re-plan models.

    A MIP's answer is not trusted: `certify` checks it against the solution returned (with
    `lp_bound`, the caller's LP relaxation value, as a bound that always holds). highspy 1.16
    warm-started can claim "optimal" with an objective and bound below the solution it
    returns; a warm-started answer that does not check out (within `rel_gap`) is solved
    again cold in the time left, and the better solution and the higher bound are kept.
    The certificate is None for an LP, or when no solution was found."""
    t0 = time.perf_counter()
    status, info, sol = run_once(lp, integer=integer, time_limit=time_limit, rel_gap=rel_gap,
                                    abs_gap=abs_gap, start=start)
    if not integer:
        return status, info, sol, None
    cert = certify(lp, sol, claimed=info.objective_function_value, dual_bound=info.mip_dual_bound,
                   lp_bound=lp_bound)
    left = time_limit - (time.perf_counter() - t0)
    if start is not None and not (cert is not None and cert.accepted(rel_gap)) and left > 0:
        st2, info2, sol2 = run_once(lp, integer=True, time_limit=left, rel_gap=rel_gap, abs_gap=abs_gap,
                                       start=None)
        cert2 = certify(lp, sol2, claimed=info2.objective_function_value, dual_bound=info2.mip_dual_bound,
                        lp_bound=lp_bound)
        if cert2 is not None and (cert is None or cert2.objective < cert.objective - 1e-9):
            status, info, sol, cert = st2, info2, sol2, cert2.joined(cert)
        elif cert is not None:
            cert = cert.joined(cert2)
    return status, info, sol, cert


@dataclass(frozen=True)
class Certificate:
    """A MIP answer checked against the solution it came with (`certify`)."""

    objective: float           # recomputed from the solution, rounded to integers
    bound: float               # a lower bound that holds (ceiled when the objective is an integer)
    claimed: float | None      # the objective HiGHS reported
    trusted: bool              # HiGHS's report matched its solution, so its dual bound counts

    @property
    def optimal(self) -> bool:
        """The objective meets a valid bound: a proven minimum."""
        return self.objective <= self.bound + 1e-9

    @property
    def gap(self) -> float:
        """(objective - bound) / objective, 0 when proven."""
        return 0.0 if self.optimal or self.objective == 0 else max(0.0, (self.objective - self.bound) / abs(self.objective))

    def accepted(self, rel_gap: float) -> bool:
        """Proven, or within the relative gap the caller asked for."""
        return self.optimal or (rel_gap > 0 and self.gap <= rel_gap)

    def joined(self, other: "Certificate | None") -> "Certificate":
        """This solution with the higher of both runs' bounds (both bound the same model)."""
        if other is None or other.bound > self.objective + 1e-9:   # a bound above a solution is none
            return self
        return Certificate(self.objective, max(self.bound, other.bound), self.claimed, self.trusted)


def certify(lp: highspy.HighsLp, sol: Vector | None, *, claimed: float | None = None, dual_bound: float | None = None,
            lp_bound: float | None = None) -> Certificate | None:
    """Check a MIP solution of `lp` and what the solver claims about it.

    The solution is rounded to integers and checked against the columns' bounds and every
    row (None if it breaks one: it is no solution); its objective is recomputed from those
    integers. The bound is `lp_bound` (the LP relaxation, always valid) and HiGHS's MIP dual
    bound only when HiGHS's reported objective equals the recomputed one (else its search ran
    on a wrong incumbent and its bound is not evidence); for an integer objective (integer
    costs and offset) its ceiling. A bound above the solution's own objective cannot be valid
    and falls back to `lp_bound`."""
    if sol is None:
        return None
    x = np.round(np.asarray(sol, dtype=float))
    cost = np.asarray(lp.col_cost_, dtype=float)
    tol = 1e-6
    if np.any(x < np.asarray(lp.col_lower_) - tol) or np.any(x > np.asarray(lp.col_upper_) + tol):
        return None
    a = lp.a_matrix_
    starts, index, value = np.asarray(a.start_), np.asarray(a.index_), np.asarray(a.value_)
    n_rows = len(lp.row_lower_)
    rows = np.repeat(np.arange(n_rows), np.diff(starts))
    act = np.bincount(rows, weights=value * x[index], minlength=n_rows) if len(index) else np.zeros(n_rows)
    lo, hi = np.asarray(lp.row_lower_, dtype=float), np.asarray(lp.row_upper_, dtype=float)
    slack = tol * (1.0 + np.abs(act))
    if np.any(act < lo - slack) or np.any(act > hi + slack):
        return None
    obj = float(cost @ x + lp.offset_)
    integral = bool(np.all(cost == np.round(cost))) and float(lp.offset_).is_integer()
    trusted = claimed is not None and abs(float(claimed) - obj) <= 1e-6 * max(1.0, abs(obj))

    def valid(use_dual: bool) -> float:
        bounds = [float(lp_bound)] if lp_bound is not None and math.isfinite(lp_bound) else []
        if use_dual and dual_bound is not None and math.isfinite(dual_bound):
            bounds.append(float(dual_bound))
        b = max(bounds) if bounds else -math.inf
        return float(math.ceil(b - 1e-6)) if integral and math.isfinite(b) else b

    bound = valid(trusted)
    if bound > obj + 1e-9:   # contradicts a solution in hand: not a bound
        trusted, bound = False, valid(False)
    return Certificate(obj, min(bound, obj), None if claimed is None else float(claimed), trusted)
