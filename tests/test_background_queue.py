"""The suite's background queue (tests/support/background.py): a job the queue has not started is run by the
test that reads it, never waited for behind the jobs queued before it; a started one is waited for."""
import threading

import pytest

from tests.support.background import BackgroundQueue


def test_a_job_not_started_is_run_by_its_reader_and_a_started_one_is_waited_for():
    queue, release = BackgroundQueue(), threading.Event()
    running = threading.Event()

    def blocker():
        running.set()
        release.wait(timeout=30)
        return threading.current_thread().name

    first = queue.submit(blocker)
    second = queue.submit(lambda: threading.current_thread().name)
    assert running.wait(timeout=30)
    # the queue is busy with the first job: reading the second runs it here, at once
    assert second.result() == threading.current_thread().name
    release.set()
    assert first.result().startswith("background")
    queue.close()


def test_a_taken_jobs_error_is_raised_to_every_reader():
    queue, release = BackgroundQueue(), threading.Event()
    queue.submit(lambda: release.wait(timeout=30))

    def fails():
        raise ValueError("the job's own error")

    job = queue.submit(fails)
    for _ in range(2):
        with pytest.raises(ValueError, match="own error"):
            job.result()
    release.set()
    queue.close()
