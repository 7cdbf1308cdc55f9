"""The record's stage time is the wall-clock span of the stage's jobs, not the sum of their times:
jobs that ran side by side (one engine per GPU) must not count twice."""
import pytest

from randopt.records.assemble import job_intervals, search_rate, wall_clock_span


def test_side_by_side_jobs_count_once():
    # Two GPUs, two waves: jobs 0 and 1 together, then 2 and 3 together (sum 40 s, wall 20 s).
    intervals = [(100.0, 110.0), (100.5, 109.0), (110.0, 120.0), (109.0, 121.0)]
    assert wall_clock_span(intervals) == pytest.approx(21.0)


def test_one_after_another_is_the_sum_with_gaps_included():
    # One GPU: the span equals the sum of job times plus the scheduler's gaps between jobs.
    intervals = [(0.0, 5.0), (6.0, 11.0), (11.0, 20.0)]
    assert wall_clock_span(intervals) == pytest.approx(20.0)


def test_order_does_not_matter_and_one_job_is_its_own_time():
    assert wall_clock_span([(50.0, 60.0), (10.0, 30.0)]) == pytest.approx(50.0)
    assert wall_clock_span([(7.0, 9.5)]) == pytest.approx(2.5)


@pytest.mark.parametrize("bad", [[], [(10.0, 9.0)], [(float("nan"), 1.0)]])
def test_bad_intervals_are_a_clear_error(bad):
    with pytest.raises(ValueError, match="interval|no job"):
        wall_clock_span(bad)


def test_intervals_come_from_the_timings_and_missing_ones_name_the_fix():
    timings = [{"seconds": 3, "started_at": 1.0, "ended_at": 4.0}, {"seconds": 2, "started_at": 2.0, "ended_at": 4.5}]
    assert job_intervals(timings) == [(1.0, 4.0), (2.0, 4.5)]
    with pytest.raises(ValueError, match="1 of 2 shard timings have no started_at/ended_at.*rerun"):
        job_intervals([timings[0], {"seconds": 2}])


def test_the_rate_is_the_population_over_the_span_only_when_this_run_generated_every_slot():
    assert search_rate(192, 240.0, 24576, 24576) == {"seeds_per_s": pytest.approx(0.8)}
    assert search_rate(8, 4.0, 0, None) == {"seeds_per_s": 2.0}   # a selection that does not count its slots
    # the distill lease's record: 192 members read from a full answer cache in 2.7 s once claimed 71.6 seeds/s
    cached = search_rate(192, 2.68, 0, 24576)
    assert cached["seeds_per_s"] is None
    assert "24576 of the 24576 train slots came from the answer cache" in cached["seeds_per_s_why"]
    resumed = search_rate(8, 3.0, 6, 8)   # a killed run's resumed search: two slots were cached
    assert resumed["seeds_per_s"] is None and resumed["seeds_per_s_why"].startswith("2 of the 8")
