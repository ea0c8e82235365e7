"""The job store's recovery rules, on the database alone (no server): each crash window settles one way."""

from __future__ import annotations

from vidax.serve import store as jobs


def running_job(db: jobs.JobStore, attempts: int = 1) -> str:
    job_id = db.add({"prompt": "x"}, {})
    for _ in range(attempts):
        assert db.take_next()["id"] == job_id
        if _ < attempts - 1:
            db.recover(lambda _: False)  # a crash while it ran: queued again
    return job_id


def test_running_job_runs_again_after_a_crash(tmp_path):
    db = jobs.JobStore(tmp_path / "jobs.sqlite3")
    job_id = running_job(db)
    assert db.recover(lambda _: False)["requeued"] == 1
    assert db.get(job_id)["status"] == jobs.QUEUED
    assert db.take_next()["attempts"] == 2


def test_crash_between_rename_and_commit_counts_one_completion(tmp_path):
    db = jobs.JobStore(tmp_path / "jobs.sqlite3")
    job_id = running_job(db)
    assert db.recover(lambda _: True)["finished"] == 1  # its video is in place: it ran to the end
    record = db.get(job_id)
    assert record["status"] == jobs.SUCCEEDED and record["completions"] == 1
    assert db.take_next() is None


def test_interrupted_three_times_is_failed_not_retried(tmp_path):
    db = jobs.JobStore(tmp_path / "jobs.sqlite3")
    job_id = running_job(db, attempts=jobs.MAX_ATTEMPTS)
    assert db.recover(lambda _: False)["failed"] == 1
    record = db.get(job_id)
    assert record["status"] == jobs.FAILED and "3 times" in record["error"]


def test_succeeded_without_its_file_is_failed(tmp_path):
    db = jobs.JobStore(tmp_path / "jobs.sqlite3")
    job_id = running_job(db)
    db.finish(job_id, jobs.SUCCEEDED)
    assert db.recover(lambda _: False)["missing"] == 1
    assert db.get(job_id)["status"] == jobs.FAILED


def test_stop_requeues_without_counting_the_attempt_and_cancel_only_while_queued(tmp_path):
    db = jobs.JobStore(tmp_path / "jobs.sqlite3")
    job_id = running_job(db)
    assert not db.cancel_queued(job_id)  # running: the worker stops it, not the store
    db.requeue(job_id)
    assert db.get(job_id)["attempts"] == 0 and db.cancel_queued(job_id)
    assert db.get(job_id)["status"] == jobs.CANCELLED and db.take_next() is None


def test_database_is_in_wal_mode_and_survives_reopening(tmp_path):
    db = jobs.JobStore(tmp_path / "jobs.sqlite3")
    job_id = db.add({"prompt": "x"}, {"steps": 2})
    assert db.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
    again = jobs.JobStore(tmp_path / "jobs.sqlite3")
    assert again.get(job_id)["settings"] == {"steps": 2} and again.count(jobs.QUEUED) == 1
