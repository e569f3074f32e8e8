"""The one HiGHS adapter: builds LPs row by row (`Rows`), runs HiGHS quietly and deterministically
(`run_once`) and owns the solver's I/O (its banner is printed on fd 1 at the C level, so the first
instance is built with fd 1 pointed at /dev/null: `new_highs`). Nothing else in the package talks
to highspy's solver object."""
from __future__ import annotations

import os
import sys
from typing import Iterable, Sequence

import highspy
import numpy as np
import numpy.typing as npt

# a column vector of the LP (costs, bounds, a solution)
Vector = npt.NDArray[np.float64]
# what one HiGHS run answers: its model status, its info, and the primal solution (None: none)
RunResult = tuple[highspy.HighsModelStatus, highspy.HighsInfo, "Vector | None"]

_BANNER_SHOWN = False


def run_once(lp: highspy.HighsLp, *, integer: bool, time_limit: float, rel_gap: float, abs_gap: float,
                start: Vector | Sequence[float] | None) -> RunResult:
    h = new_highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("time_limit", max(float(time_limit), 1e-3))
    if integer:
        h.setOptionValue("mip_rel_gap", float(rel_gap))
        h.setOptionValue("mip_abs_gap", abs_gap)
    h.passModel(lp)
    if integer and start is not None:
        warm = highspy.HighsSolution()
        warm.col_value = list(map(float, start))
        warm.value_valid = True
        h.setSolution(warm)
    h.run()
    status, info = h.getModelStatus(), h.getInfo()
    sol = np.array(h.getSolution().col_value) if info.primal_solution_status == 2 else None
    return status, info, sol


class Rows:
    """The constraint rows of a HiGHS LP, added one at a time (row-wise sparse matrix);
    `lp()` makes the `HighsLp`. Shared by the plan and the re-plan models."""

    def __init__(self) -> None:
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.starts: list[int] = [0]
        self.index: list[int] = []
        self.value: list[float] = []

    def add(self, entries: Iterable[tuple[int, float]], lo: float, hi: float) -> None:
        """One row `lo <= sum(v * x[j] for j, v in entries) <= hi`."""
        for j, v in entries:
            self.index.append(j)
            self.value.append(v)
        self.starts.append(len(self.index))
        self.lower.append(lo)
        self.upper.append(hi)

    def lp(self, cost: Vector, lower: Vector, upper: Vector, *, integer: bool, offset: float = 0.0
           ) -> highspy.HighsLp:
        """The LP (or MIP with `integer`) over these rows and columns."""
        n = len(cost)
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = n, len(self.lower)
        lp.col_cost_, lp.col_lower_, lp.col_upper_ = cost, lower, upper
        lp.offset_ = offset
        lp.row_lower_ = np.array(self.lower, dtype=float)
        lp.row_upper_ = np.array(self.upper, dtype=float)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = np.array(self.starts, dtype=np.int32)
        lp.a_matrix_.index_ = np.array(self.index, dtype=np.int32)
        lp.a_matrix_.value_ = np.array(self.value, dtype=float)
        lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n, len(self.lower)
        if integer:
            lp.integrality_ = [highspy.HighsVarType.kInteger] * n
        return lp


def new_highs() -> highspy.Highs:
    """A Highs instance; the first one prints a banner on fd 1 (C level), which would corrupt
    `--output json`, so that one is built with fd 1 pointed at /dev/null."""
    global _BANNER_SHOWN
    if _BANNER_SHOWN:
        return highspy.Highs()  # type: ignore[no-untyped-call]  # highspy 1.x: Highs.__init__ is unannotated
    sys.stdout.flush()
    saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        h = highspy.Highs()  # type: ignore[no-untyped-call]
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
    _BANNER_SHOWN = True
    return h
