"""The first-block cache around a diffusers DiT's block list, written here in torch independently of vidax:
the oracle for the families diffusers' hooks do not reach.

Per DiT call (calls alternate over `branches`, each with its own state): block 0 always runs; the relative
mean change `mean |r - r_prev| / mean |r_prev|` of its video residual `r` (the stream at `video`, the
position of the video tokens among a block's arguments and outputs) against the last call that ran the
remaining blocks decides: above `threshold` (or with nothing cached) they run and their residuals (every
stream a block returns) are kept; otherwise the kept residuals are added to block 0's output.
"""

from __future__ import annotations

import torch


class FirstBlockBlocks(torch.nn.ModuleList):
    def __init__(self, blocks, threshold: float, branches: int, video: int = 0):
        super().__init__(list(blocks))
        self.threshold, self.branches, self.video = threshold, branches, video
        self.calls, self.decisions, self.changes = 0, [], []
        self.states = [{} for _ in range(branches)]

    def __iter__(self):
        blocks = list(self._modules.values())
        state = self.states[self.calls % self.branches]
        self.calls += 1

        def run(*args):
            first = blocks[0](*args)
            streams = first if isinstance(first, tuple) else (first,)
            residual = (streams[self.video] - args[self.video]).float()
            full = "residual" not in state
            change = None
            if not full:
                previous = state["residual"]
                change = ((residual - previous).abs().mean() / previous.abs().mean()).item()
                full = change > self.threshold
            self.decisions.append(full)
            self.changes.append(change)
            if not full:
                out = tuple(s + t for s, t in zip(streams, state["tail"]))
                return out if isinstance(first, tuple) else out[0]
            out = first
            for block in blocks[1:]:
                out = block(*out, *args[len(streams):]) if isinstance(out, tuple) else block(out, *args[1:])
            outs = out if isinstance(out, tuple) else (out,)
            state["residual"], state["tail"] = residual, tuple(o - s for o, s in zip(outs, streams))
            return out

        return iter([run])


class ScheduledResidualBlocks(torch.nn.ModuleList):
    """MagCache's step in torch with its decisions given (typed by hand in the test): a call on a full step
    runs every block and keeps the video residual (output minus input of the block stack); a skipped call
    returns its input plus that branch's kept residual. With `video` set, the blocks take and return several
    streams and only the one at `video` is the block stack's residual stream (the others pass a skipped call
    unchanged, as diffusers' MagCache head hook returns them)."""

    def __init__(self, blocks, schedule: list[bool], branches: int, video: int | None = None):
        super().__init__(list(blocks))
        self.schedule, self.branches, self.calls, self.residuals = schedule, branches, 0, {}
        self.video, self.streams = video, None

    def __iter__(self):
        blocks = list(self._modules.values())
        branch, step = self.calls % self.branches, self.calls // self.branches
        self.calls += 1

        def run_streams(*args):
            # the blocks return their leading arguments (the streams); the rest is context (embeddings, masks,
            # rotary tables), passed to every block. A full call comes first (step 0), so the count is known.
            if not self.schedule[step]:
                return tuple(a + self.residuals[branch] if i == self.video else a
                             for i, a in enumerate(args[:self.streams]))
            out = blocks[0](*args)
            self.streams = len(out)
            for block in blocks[1:]:
                out = block(*out, *args[self.streams:])
            self.residuals[branch] = out[self.video] - args[self.video]
            return out

        def run(hidden, *rest):
            if self.video is not None:
                return run_streams(hidden, *rest)
            if not self.schedule[step]:
                return hidden + self.residuals[branch]
            out = hidden
            for block in blocks:
                out = block(out, *rest)
            self.residuals[branch] = out - hidden
            return out

        return iter([run])


class AudioVideoBlocks(torch.nn.ModuleList):
    """LTX-2's block list (called by keyword, each block returning `(video, audio)`) under one decision per
    DiT call for both streams. With `schedule` (MagCache's decisions, typed by hand): a full call runs every
    block and keeps both streams' residuals of the stack, a skipped one adds them to its inputs. Without it,
    the first-block cache at `threshold`: block 0 always runs, the statistic is its video residual's
    relative mean change against the last full call, and the remaining blocks' residuals of both streams are
    kept or added. The CFG pair is one batched call (one statistic over both rows)."""

    def __init__(self, blocks, threshold: float | None = None, schedule: list[bool] | None = None):
        super().__init__(list(blocks))
        self.threshold, self.schedule = threshold, schedule
        self.decisions, self.changes, self.kept, self.previous = [], [], None, None

    def __iter__(self):
        blocks = list(self._modules.values())
        step = len(self.decisions)

        def call(block, streams, rest):
            return block(hidden_states=streams[0], audio_hidden_states=streams[1], **rest)

        def run_all(streams, rest, start):
            for block in blocks[start:]:
                streams = call(block, streams, rest)
            return streams

        def run(hidden_states, audio_hidden_states, **rest):
            inputs = (hidden_states, audio_hidden_states)
            if self.schedule is not None:
                full = self.schedule[step]
                self.decisions.append(full)
                if not full:
                    return tuple(s + k for s, k in zip(inputs, self.kept))
                out = run_all(inputs, rest, 0)
                self.kept = tuple(o - s for o, s in zip(out, inputs))
                return out
            first = call(blocks[0], inputs, rest)
            residual = (first[0] - inputs[0]).float()
            change = None
            if self.previous is not None:
                change = ((residual - self.previous).abs().mean() / self.previous.abs().mean()).item()
            full = change is None or change > self.threshold
            self.decisions.append(full)
            self.changes.append(change)
            if not full:
                return tuple(s + k for s, k in zip(first, self.kept))
            out = run_all(first, rest, 1)
            self.previous, self.kept = residual, tuple(o - s for o, s in zip(out, first))
            return out

        return iter([run])
