"""randopt/records/paired.py on cases worked out by hand: McNemar's exact p, its rejection set and power, the
smallest detectable gain, and Holm's adjustment."""
import pytest

from randopt.records.paired import detectable_gain, discordant, exact_power, holm, mcnemar_exact_p, rejection_counts


def test_discordant_counts_each_side():
    a = [True, True, False, False, True]
    b = [True, False, True, True, False]
    assert discordant(a, b) == (2, 2)
    assert discordant([False, False, True], [True, True, True]) == (2, 0)


def test_exact_p_is_twice_the_smaller_binomial_tail():
    assert mcnemar_exact_p(38, 8) == pytest.approx(2 * sum(__import__("math").comb(46, i) for i in range(9)) / 2**46)
    assert mcnemar_exact_p(4, 0) == pytest.approx(0.125)
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(5, 5) == 1.0


def test_rejection_set_of_ten_discordant_problems():
    # p(9 of 10) = 2 * 11 / 1024 = 0.021 <= 0.05; p(8 of 10) = 2 * 56 / 1024 = 0.109 > 0.05
    assert rejection_counts(10).tolist() == [0, 1, 9, 10]
    assert rejection_counts(5).tolist() == []       # 2 / 32 = 0.0625: no count of 5 rejects
    assert rejection_counts(6).tolist() == [0, 6]   # 2 / 64 = 0.031


def test_power_is_the_rejection_sets_probability():
    pi = 0.8
    by_hand = pi**10 + 10 * pi**9 * (1 - pi) + (1 - pi)**10 + 10 * (1 - pi)**9 * pi
    assert exact_power(10, pi) == pytest.approx(by_hand, abs=1e-12)
    assert exact_power(10, 0.5) == pytest.approx(22 / 1024)   # at no difference: the test's own size


def test_detectable_gain_has_the_target_power():
    gain = detectable_gain(100, 10)
    pi = (gain * 100 / 10 + 1) / 2      # gain = (2 pi - 1) D / n
    assert exact_power(10, pi) == pytest.approx(0.8, abs=1e-9)
    # pi^10 + 10 pi^9 (1 - pi) is 0.8 near pi = 0.9167 (0.4190 + 0.3808; the lower tail adds ~1e-10): a gain of ~0.083
    assert gain == pytest.approx(0.0833, abs=5e-4)


def test_detectable_gain_of_the_h100_records_selection_comparison():
    # issue 68: 50 discordant problems of 512 (top-10 % vs random-10 %) detect ~4 points at 80 % power
    assert detectable_gain(512, 50) == pytest.approx(0.04, abs=0.002)
    # more problems, same discordance rate: a smaller detectable gain
    assert detectable_gain(1024, 100) < detectable_gain(512, 50)


def test_no_detectable_gain_without_enough_discordant_problems():
    assert detectable_gain(100, 0) is None
    assert detectable_gain(100, 5) is None
    # only 0 or 6 of 6 rejects (2 / 64): power pi^6 + (1 - pi)^6 = 0.8 at pi ~ 0.8**(1/6)
    assert detectable_gain(100, 6) == pytest.approx((2 * 0.8**(1 / 6) - 1) * 6 / 100, abs=1e-6)


def test_holm_steps_down_and_stays_monotone():
    # sorted 0.02, 0.041, 0.3: x3, x2, x1, each at least the last: 0.06, 0.082, 0.3
    assert holm({"0.1": 0.041, "0.25": 0.3, "0.5": 0.02}) == pytest.approx({"0.5": 0.06, "0.1": 0.082, "0.25": 0.3})
    # a later smaller product keeps the earlier larger value
    assert holm({"a": 0.01, "b": 0.011, "c": 0.012}) == pytest.approx({"a": 0.03, "b": 0.03, "c": 0.03})
    assert holm({"a": 0.6, "b": 0.7}) == {"a": 1.0, "b": 1.0}
    assert holm({"only": 0.041}) == {"only": 0.041}
