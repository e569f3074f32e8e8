"""Independent oracles for tests: textbook formulas computed exactly, never the code under test."""
from __future__ import annotations

import math
from fractions import Fraction


def erlang_c_oracle(c: int, a: Fraction) -> Fraction:
    """Erlang C from its textbook sum formula, exact (an independent oracle)."""
    if a >= c:
        return Fraction(1)
    top = a ** c / math.factorial(c) * Fraction(c) / (c - a)
    return top / (sum(a ** k / math.factorial(k) for k in range(c)) + top)


def replicas_oracle(rate: float, mu: float, p_max=Fraction(1, 5), wait_max=Fraction(1)) -> int:
    """Smallest c with P(wait) <= 20% and mean queue wait <= 1 s (the planner's defaults)."""
    lam, mu = Fraction(rate).limit_denominator(1000), Fraction(mu).limit_denominator(1000)
    c = 1
    while True:
        if lam < c * mu:
            p = erlang_c_oracle(c, lam / mu)
            if p <= p_max and p / (c * mu - lam) <= wait_max:
                return c
        c += 1
