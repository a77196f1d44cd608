"""``java.util.Random``, bit for bit: the 48-bit linear congruential generator documented in the Java API.

coflowsim draws one ``deadlineMult = 1 + nextDouble()`` per coflow from ``new Random(17)``; the SEBF back-fill
order depends on it, so parity needs the exact stream. Contract (Java SE API, ``java.util.Random``):

* seed scrambling: ``(seed ^ 0x5DEECE66D) & (2**48 - 1)``;
* ``next(bits)``: ``seed = (seed * 0x5DEECE66D + 0xB) mod 2**48``, return the top ``bits`` bits as a signed int;
* ``nextDouble()``: ``((next(26) << 27) + next(27)) * 2**-53``;
* ``nextInt(bound)``: power-of-two shortcut, otherwise rejection of the biased top range;
* ``nextLong()``: ``(next(32) << 32) + next(32)`` with signed 32-bit halves.
"""

from __future__ import annotations

_MULT = 0x5DEECE66D
_ADD = 0xB
_MASK = (1 << 48) - 1


def _to_int32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= (1 << 31) else x


def _to_int64(x: int) -> int:
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= (1 << 63) else x


class JavaRandom:
    """Same stream as ``new java.util.Random(seed)`` for the methods below."""

    def __init__(self, seed: int):
        self._seed = (int(seed) ^ _MULT) & _MASK

    def next_bits(self, bits: int) -> int:
        if not 1 <= bits <= 32:
            raise ValueError(f"bits must be in [1, 32], got {bits}")
        self._seed = (self._seed * _MULT + _ADD) & _MASK
        return _to_int32(self._seed >> (48 - bits))

    def next_int(self, bound: int | None = None) -> int:
        if bound is None:
            return self.next_bits(32)
        if bound <= 0:
            raise ValueError(f"bound must be positive, got {bound}")
        if bound & (bound - 1) == 0:
            return _to_int32((bound * self.next_bits(31)) >> 31)
        while True:
            bits = self.next_bits(31)
            val = bits % bound
            if bits - val + (bound - 1) < (1 << 31):
                return val

    def next_long(self) -> int:
        return _to_int64((self.next_bits(32) << 32) + self.next_bits(32))

    def next_double(self) -> float:
        return ((self.next_bits(26) << 27) + self.next_bits(27)) * (1.0 / (1 << 53))
