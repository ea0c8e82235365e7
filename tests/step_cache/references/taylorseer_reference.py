"""TaylorSeer on a whole diffusers DiT, written here in torch independently of vidax: the oracle for the
families diffusers' cache hooks do not reach (their block registry lacks them).

`install` swaps the DiT's `forward` for one that counts calls per CFG branch (calls alternate over
`branches`), runs the DiT on the schedule given as a list of booleans (typed in the test by hand) and
otherwise returns the Taylor series of the recorded outputs (float32 divided differences up to `order`,
as diffusers' lite TaylorSeer keeps them; a DiT returning several outputs, LTX-2's video and audio, has
each extrapolated on its own under the one decision).
"""

from __future__ import annotations

import math

import torch


def install(transformer, schedule: list[bool], order: int, branches: int) -> list[bool]:
    """Patch `transformer.forward`; returns the log of full calls (one entry per DiT call)."""
    original = transformer.forward
    states = [{"calls": 0, "last": None, "factors": []} for _ in range(branches)]
    log: list[bool] = []

    def forward(*args, **kwargs):
        state = states[len(log) % branches]
        step = state["calls"]
        state["calls"] += 1
        log.append(schedule[step])
        if schedule[step]:
            out = original(*args, **kwargs)
            outputs = tuple(out) if isinstance(out, tuple) else (out.sample,)  # LTX-2: (video, audio)
            _update(state, [o.float() for o in outputs], step, order)
            return out
        offset = step - state["last"]
        return tuple(sum(f * (offset**k / math.factorial(k)) for k, f in enumerate(factors)).to(dtype)
                     for factors, dtype in zip(state["factors"], state["dtypes"]))

    def _update(state, outputs, step, order):
        delta = None if state["last"] is None else step - state["last"]
        factors = []
        for index, output in enumerate(outputs):  # every output its own series, under the one decision
            previous = state["factors"][index] if state["factors"] else []
            new = [output]
            for k in range(min(order, len(previous)) if delta else 0):
                new.append((new[k] - previous[k]) / delta)
            factors.append(new)
        state["factors"], state["last"], state["dtypes"] = factors, step, [o.dtype for o in outputs]

    transformer.forward = forward
    return log
