"""Which ids users ask for: a Zipf law over an id range, or uniform.

Real traffic is skewed: a few products take most page views and a long tail is seldom
asked for. :class:`Popularity` draws ranks from a Zipf law (rank ``r`` of ``n`` with
probability proportional to ``r ** -s``) by rejection-inversion (W. Hörmann and G.
Derflinger, "Rejection-inversion to generate variates from monotone discrete
distributions", 1996): constant time per draw and no table, so a range of a million ids
costs nothing. Which id holds which rank is a seeded affine permutation of the range
(``id = low + (a * (rank - 1) + b) mod n`` with ``gcd(a, n) = 1``): the popular ids are
scattered over the range and differ from one run to the next, so no build can learn them
in advance, while two clients given the same seed (the load and the prober) agree on them.
"""

from __future__ import annotations

import math
import random
from typing import Literal

Kind = Literal["zipf", "uniform"]


def _expm1_over_x(x: float) -> float:
    """(e^x - 1) / x, continuous at 0."""
    return math.expm1(x) / x if abs(x) > 1e-8 else 1.0 + x / 2.0 + x * x / 6.0


def _log1p_over_x(x: float) -> float:
    """log(1 + x) / x, continuous at 0."""
    return math.log1p(x) / x if abs(x) > 1e-8 else 1.0 - x / 2.0 + x * x / 3.0


class _Zipf:
    """Ranks 1..n with P(r) proportional to r^-s (rejection-inversion)."""

    def __init__(self, n: int, s: float) -> None:
        self.n, self.s = n, s
        self.h_x1 = self._big_h(1.5) - 1.0
        self.h_n = self._big_h(n + 0.5)
        self.squeeze = 2.0 - self._big_h_inv(self._big_h(2.5) - self._h(2.0))

    def _h(self, x: float) -> float:
        return math.exp(-self.s * math.log(x))

    def _big_h(self, x: float) -> float:
        """The integral of h from 1 to x: (x^(1-s) - 1) / (1 - s), log x at s = 1."""
        log_x = math.log(x)
        return _expm1_over_x((1.0 - self.s) * log_x) * log_x

    def _big_h_inv(self, y: float) -> float:
        t = max(-1.0, y * (1.0 - self.s))
        return math.exp(_log1p_over_x(t) * y)

    def draw(self, rng: random.Random) -> int:
        while True:
            u = self.h_n + rng.random() * (self.h_x1 - self.h_n)
            x = self._big_h_inv(u)
            k = min(self.n, max(1, round(x)))
            if k - x <= self.squeeze or u >= self._big_h(k + 0.5) - self._h(k):
                return k


class Popularity:
    """The ids of ``[low, high]`` and how often each is asked for (see the module doc)."""

    def __init__(
        self,
        low: int,
        high: int,
        *,
        kind: Kind = "zipf",
        exponent: float = 1.0,
        seed: int | None = None,
    ) -> None:
        if low > high:
            raise ValueError(f"empty id range [{low}, {high}]")
        self.low, self.high, self.kind = low, high, kind
        self.n = high - low + 1
        layout = random.Random(seed)
        self.a = 1
        if self.n > 1:
            self.a = layout.randrange(1, self.n)
            while math.gcd(self.a, self.n) != 1:
                self.a = layout.randrange(1, self.n)
        self.b = layout.randrange(self.n)
        self._zipf = _Zipf(self.n, exponent) if kind == "zipf" and self.n > 1 else None

    def id_of(self, rank: int) -> int:
        """The id holding ``rank`` (1 = the most popular)."""
        return self.low + (self.a * (rank - 1) + self.b) % self.n

    def draw(self, rng: random.Random) -> int:
        """One id, as one user would ask for it."""
        if self._zipf is None:
            return rng.randint(self.low, self.high)
        return self.id_of(self._zipf.draw(rng))

    def top(self, k: int) -> list[int]:
        """The ``k`` ids whose answers are worth knowing: the most popular ``k`` under
        Zipf, ``k`` spread evenly over the range when uniform (all of it if ``k >= n``)."""
        if k >= self.n:
            return list(range(self.low, self.high + 1))
        if self._zipf is None:
            return [self.low + (i * self.n) // k for i in range(k)]
        return [self.id_of(r) for r in range(1, k + 1)]
