"""The job store: every job and its state in one SQLite database (WAL) under the server's data folder.

The database is the queue: the worker takes the oldest `queued` row, so a restart finds every job
where it was left. State changes are single statements (or one transaction), so a crash leaves each
job in exactly one state, and `recover` settles the ones a crash interrupted.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED = "queued", "running", "succeeded", "failed", "cancelled"
FINISHED = (SUCCEEDED, FAILED, CANCELLED)
MAX_ATTEMPTS = 3  # a job interrupted this many times (the server died while it ran) is failed, not retried

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT UNIQUE NOT NULL,
  status TEXT NOT NULL,
  request TEXT NOT NULL,          -- the API request's fields (JSON); uploads by role, never client paths
  settings TEXT NOT NULL,         -- the resolved settings at submission, then the run's (JSON)
  progress TEXT NOT NULL DEFAULT '{}',
  times TEXT NOT NULL DEFAULT '{}',
  error TEXT,
  attempts INTEGER NOT NULL DEFAULT 0,
  completions INTEGER NOT NULL DEFAULT 0,  -- times the job ran to a written video: 0 or 1
  created REAL NOT NULL,
  started REAL,
  finished REAL
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status, seq);
"""

JSON_COLUMNS = ("request", "settings", "progress", "times")


class JobStore:
    """Jobs in SQLite, shared by the HTTP handlers and the worker thread (one connection under a lock).

    Args:
      path: the database file (created with its folder).
    """

    def __init__(self, path: str | Path):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")  # a committed state change survives a power cut
        self.db.executescript(SCHEMA)

    def _run(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        with self.lock:
            return self.db.execute(sql, args)

    def add(self, request: dict, settings: dict, job_id: str | None = None) -> str:
        job_id = job_id or new_id()
        self._run("INSERT INTO jobs (id, status, request, settings, created) VALUES (?, ?, ?, ?, ?)",
                  (job_id, QUEUED, json.dumps(request), json.dumps(settings), time.time()))
        return job_id

    def get(self, job_id: str) -> dict | None:
        row = self._run("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _record(row) if row is not None else None

    def page(self, limit: int, before: int | None = None) -> list[dict]:
        """Newest first; `before` is the `seq` the previous page ended at."""
        rows = self._run("SELECT * FROM jobs WHERE seq < ? ORDER BY seq DESC LIMIT ?",
                         (before if before is not None else 2**62, limit)).fetchall()
        return [_record(row) for row in rows]

    def count(self, status: str) -> int:
        return self._run("SELECT COUNT(*) FROM jobs WHERE status = ?", (status,)).fetchone()[0]

    def take_next(self) -> dict | None:
        """Mark the oldest queued job running (one attempt more) and return it; None when none waits."""
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                row = self.db.execute("SELECT id FROM jobs WHERE status = ? ORDER BY seq LIMIT 1", (QUEUED,)).fetchone()
                if row is not None:
                    self.db.execute("UPDATE jobs SET status = ?, started = ?, attempts = attempts + 1, progress = '{}' "
                                    "WHERE id = ?", (RUNNING, time.time(), row["id"]))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        return self.get(row["id"]) if row is not None else None

    def set_progress(self, job_id: str, progress: dict) -> None:
        self._run("UPDATE jobs SET progress = ? WHERE id = ? AND status = ?", (json.dumps(progress), job_id, RUNNING))

    def finish(self, job_id: str, status: str, *, error: str | None = None, settings: dict | None = None,
               times: dict | None = None) -> None:
        """A running job's end: succeeded (its video is in place), failed (one-line error) or cancelled."""
        completed = 1 if status == SUCCEEDED else 0
        self._run("UPDATE jobs SET status = ?, error = ?, finished = ?, completions = completions + ?, "
                  "settings = COALESCE(?, settings), times = COALESCE(?, times) WHERE id = ?",
                  (status, error, time.time(), completed, json.dumps(settings) if settings is not None else None,
                   json.dumps(times) if times is not None else None, job_id))

    def requeue(self, job_id: str) -> None:
        """A running job the server stopped on purpose: queued again, the attempt not counted."""
        self._run("UPDATE jobs SET status = ?, attempts = attempts - 1, progress = '{}' WHERE id = ? AND status = ?",
                  (QUEUED, job_id, RUNNING))

    def cancel_queued(self, job_id: str) -> bool:
        """Cancel a job that has not started; False when it is no longer queued."""
        cursor = self._run("UPDATE jobs SET status = ?, finished = ? WHERE id = ? AND status = ?",
                           (CANCELLED, time.time(), job_id, QUEUED))
        return cursor.rowcount == 1

    def recover(self, video_exists: Callable[[str], bool]) -> dict[str, int]:
        """Settle what a crash or stop left: a `running` job whose video is in place finished (the crash came
        between the rename and the commit), else runs again (failed after MAX_ATTEMPTS); a `succeeded` job
        whose video is gone is failed. Returns how many of each were changed."""
        counts = {"finished": 0, "requeued": 0, "failed": 0, "missing": 0}
        for row in self._run("SELECT id, attempts FROM jobs WHERE status = ?", (RUNNING,)).fetchall():
            if video_exists(row["id"]):
                self.finish(row["id"], SUCCEEDED)
                counts["finished"] += 1
            elif row["attempts"] >= MAX_ATTEMPTS:
                self.finish(row["id"], FAILED, error=f"the server stopped while this job ran, {row['attempts']} times; "
                                                     "not retried again")
                counts["failed"] += 1
            else:
                self._run("UPDATE jobs SET status = ?, progress = '{}' WHERE id = ?", (QUEUED, row["id"]))
                counts["requeued"] += 1
        for row in self._run("SELECT id FROM jobs WHERE status = ?", (SUCCEEDED,)).fetchall():
            if not video_exists(row["id"]):
                self._run("UPDATE jobs SET status = ?, error = ? WHERE id = ?",
                          (FAILED, "its video is missing from the server's data folder", row["id"]))
                counts["missing"] += 1
        return counts

    def close(self) -> None:
        with self.lock:
            self.db.close()


def new_id() -> str:
    return uuid.uuid4().hex[:16]


def _record(row: sqlite3.Row) -> dict:
    record = dict(row)
    for column in JSON_COLUMNS:
        record[column] = json.loads(record[column])
    return record
