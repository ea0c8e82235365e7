"""The events stream on its own, against a stand-in service: the steps a job publishes just before it ends
reach the stream even when the job has ended by the next poll (CI once lost the last denoise step so)."""

from __future__ import annotations

import asyncio
import json

from vidax.serve.app import _event_stream


class EndingService:
    """A job that publishes steps 0..3, then ends before the stream polls again."""

    def __init__(self):
        self.trail = [{"stage": "denoise", "step": i, "total": 3} for i in range(2)]
        self.polls = 0

    def progress_since(self, job_id, index):
        return self.trail[index:]

    def status(self, job_id):
        self.polls += 1
        if self.polls == 2:  # between the first and second poll the job runs its last steps and ends
            self.trail += [{"stage": "denoise", "step": i, "total": 3} for i in (2, 3)]
            self.trail.append({"stage": "decode", "step": 0, "total": None})
            return {"id": job_id, "status": "succeeded", "progress": self.trail[-1], "content": "/v1/videos/j/content",
                    "finished": 1.0}
        state = "running" if self.polls == 1 else "succeeded"
        return {"id": job_id, "status": state, "progress": self.trail[-1], "finished": None if state == "running" else 1.0,
                **({"content": "/v1/videos/j/content"} if state == "succeeded" else {})}


class Connected:
    async def is_disconnected(self):
        return False


def test_steps_published_before_the_end_reach_the_stream():
    async def collect():
        return [chunk async for chunk in _event_stream(EndingService(), "j", Connected())]

    seen = [json.loads(chunk.split("data: ", 1)[1]) for chunk in asyncio.run(collect()) if "data: " in chunk]
    running = [e["progress"] for e in seen if e["status"] == "running"]
    assert [p["step"] for p in running if p["stage"] == "denoise"] == [0, 1, 2, 3]
    assert running[-1]["stage"] == "decode" and all("content" not in e for e in seen if e["status"] == "running")
    assert seen[-1]["status"] == "succeeded" and seen[-1]["content"] == "/v1/videos/j/content"
