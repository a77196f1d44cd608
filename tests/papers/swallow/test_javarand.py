"""java.util.Random parity; reference values printed once by OpenJDK 17 (javac/java) and committed here."""

import pytest

from mlsys_repro.papers.swallow.javarand import JavaRandom

# new Random(17).nextDouble() x 8 (coflowsim's deadlineMult stream)
R17_DOUBLES = [0.7323115139597316, 0.6973704783607497, 0.08295611145017068, 0.8162364511057306,
               0.0443859375038691, 0.23973661293649284, 0.707454821689446, 0.6594836922590074]
R13_INTS_150 = [142, 100, 125, 148, 13, 110, 43, 113]
RM5_INTS = [1156638822, 1560933443, 1434915906, 1475992656, 1635930704, -1322608526]
R42_INTS_POW2_64 = [46, 3, 43, 3, 19, 60]
R123456789_LONGS = [-6197403153606331135, 8429272609719263920, 7203573180470058788, -1967508324443428465]
R17_SUM526 = 266.7691477458447


def test_next_double_matches_java():
    r = JavaRandom(17)
    assert [r.next_double() for _ in range(8)] == R17_DOUBLES


def test_sum_of_526_doubles_is_bit_exact():
    r = JavaRandom(17)
    s = 0.0
    for _ in range(526):
        s += r.next_double()
    assert s == R17_SUM526


def test_next_int_bounded_unbounded_and_pow2():
    r = JavaRandom(13)
    assert [r.next_int(150) for _ in range(8)] == R13_INTS_150
    r = JavaRandom(-5)
    assert [r.next_int() for _ in range(6)] == RM5_INTS
    r = JavaRandom(42)
    assert [r.next_int(64) for _ in range(6)] == R42_INTS_POW2_64


def test_next_long_matches_java():
    r = JavaRandom(123456789)
    assert [r.next_long() for _ in range(4)] == R123456789_LONGS


def test_bad_arguments():
    with pytest.raises(ValueError):
        JavaRandom(1).next_int(0)
    with pytest.raises(ValueError):
        JavaRandom(1).next_bits(33)
