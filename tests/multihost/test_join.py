"""Joining a multi-process run, and a peer lost between generations: every process ends with one
`error:` line and exit code 1, in bounded time (real `jax.distributed` processes on loopback)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from tests.multihost.launch import ROOT, death_time, error_line, free_port, launch


def test_different_process_counts_stop_both_with_one_line(tmp_path):
    """Process 0's coordinator expects 2 processes, process 1 was told 3: both join, then compare."""
    results, seconds = launch({"join": {}}, tmp_path, 1, told=(2, 3), timeout=60)
    for code, output in results:
        assert code == 1, output[-4000:]
        assert "num_processes is 2 on process 0 but 3 on process 1" in error_line(output)
    assert seconds < 45


def test_a_join_that_cannot_complete_ends_at_the_join_timeout(tmp_path):
    """The coordinator waits for 3 processes and only 2 come: both give up after --join-timeout (3 s),
    not JAX's fixed 300 s."""
    results, seconds = launch({"join": {}}, tmp_path, 1, told=(3, 2), join_timeout=3, timeout=60)
    for code, output in results:
        assert code == 1, output[-4000:]
        assert "could not join" in error_line(output) and "join timeout (3 s)" in error_line(output)
    assert seconds < 40


def test_a_coordinator_port_in_use_fails_every_process_fast(tmp_path):
    """Another program listens on the port: process 0 cannot start its coordinator, and process 1
    (whose join timeout is long) must not wait for it."""
    port = free_port()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        results, seconds = launch({"join": {}}, tmp_path, 1, port=port, join_timeout=300, timeout=60)
    (code0, out0), (code1, out1) = results
    assert code0 == 1 and code1 == 1, out0[-2000:] + out1[-2000:]
    assert f"port {port} is already in use" in error_line(out0)
    assert "not as a JAX coordinator" in error_line(out1)
    assert seconds < 40


def test_a_peer_that_dies_ends_an_idle_survivor_at_once(tmp_path):
    """Process 1 exits hard once joined; process 0 is in no collective (nothing fails under it) and the
    heartbeat timeout is 60 s: process 0 must end at once with one line and exit code 1, not SIGABRT."""
    ends: list[float] = []
    results, _ = launch({"join": {"die_on_process": 1, "sleep": 60}}, tmp_path, 1, heartbeat=60, timeout=60, ends=ends)
    (code0, out0), (code1, out1) = results
    assert code1 == 9
    assert code0 == 1, out0[-4000:]
    assert "process 1 of the multi-process run stopped (it died" in error_line(out0)
    assert ends[0] - death_time(out1) < 5


def test_without_its_watch_connection_a_dead_peer_is_found_by_the_heartbeat(tmp_path):
    """Process 1 could not connect to process 0 (a firewall) and dies: the coordination service's
    heartbeat (3 s) ends process 0 with one line and exit code 1, not with SIGABRT and a C++ dump."""
    ends: list[float] = []
    case = {"die_on_process": 1, "sleep": 60, "unwatched_process": 1}
    results, _ = launch({"join": case}, tmp_path, 1, heartbeat=3, timeout=60, ends=ends)
    (code0, out0), (code1, out1) = results
    assert code1 == 9
    assert code0 == 1, out0[-4000:]
    assert "lost a process" in error_line(out0)
    assert ends[0] - death_time(out1) < 3 + 2  # the heartbeat timeout, and the service's check (about 1 s)


def test_vidax_gen_takes_the_join_timeout(tmp_path):
    """`vidax-gen --join-timeout 2` on a process whose coordinator never starts: one line after 2 s."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "vidax.cli.gen", "wan2.1-t2v-1.3b", "--prompt", "x",
               "--out", str(tmp_path / "x.mp4"), "--coordinator", f"127.0.0.1:{free_port()}",
               "--num-processes", "2", "--process-id", "1", "--join-timeout", "2"]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no coordinator at" in error_line(done.stdout + done.stderr)
    assert "join timeout (2 s)" in error_line(done.stdout + done.stderr)
    assert time.perf_counter() - start < 30
