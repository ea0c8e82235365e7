"""ComfyUI's EasyCache node around a diffusers DiT's forward, written here in torch independently of vidax:
the oracle of tests/step_cache/test_teacache.py's EasyCache test.

The DiT is called once per CFG branch (calls alternate over `branches`; the first is ComfyUI's first
cond, which decides for all). Sigma is the call's timestep / 1000; the window's sigmas come from the
start and end percents under the flow shift (ComfyUI's `percent_to_sigma`). Inputs and outputs are
compared on every 8th position of the last two axes; a skip returns the input plus that branch's last
output-minus-input.
"""

from __future__ import annotations


def percent_to_sigma(percent: float, shift: float) -> float:
    if percent <= 0.0:
        return 1.0
    if percent >= 1.0:
        return 0.0
    t = 1.0 - percent
    return shift * t / (1 + (shift - 1) * t)


def install(transformer, threshold: float, start: float, end: float, shift: float, branches: int) -> dict:
    """Patch `transformer.forward`; returns the record: "full" (per call whether the DiT ran) and "sums" (the
    cumulative change at each decision)."""
    original = transformer.forward
    start_t, end_t = percent_to_sigma(start, shift), percent_to_sigma(end, shift)
    s = {"full": [], "calls": 0, "diffs": {}, "first": False, "x_prev": None, "out_prev": None, "norm": None,
         "rate": None, "cumulative": 0.0, "skip": False, "sums": []}
    sub = lambda t: t[..., ::8, ::8]  # noqa: E731

    def forward(*args, **kwargs):
        branch = s["calls"] % branches
        s["calls"] += 1
        x = kwargs["hidden_states"]
        sigma = float(kwargs["timestep"].flatten()[0]) / 1000.0
        if not sigma > end_t:
            s["full"].append(True)
            return original(*args, **kwargs)
        if branch == 0:
            s["skip"] = False
        leader = branch == 0 and (s["first"] or sigma <= start_t)
        input_change = None
        if sigma <= start_t:
            can_apply = all(b in s["diffs"] for b in range(branches))
            if s["skip"] and can_apply:
                s["full"].append(False)
                return (x[:, :16] + s["diffs"][branch],)
            if branch == 0:
                s["first"] = True
                if s["x_prev"] is not None:
                    input_change = (sub(x[:, :16]) - s["x_prev"]).abs().mean()
                if s["norm"] is not None and s["rate"] is not None:
                    s["cumulative"] += float(s["rate"] * input_change / s["norm"])
                    s["sums"].append(s["cumulative"])
                    if s["cumulative"] < threshold and can_apply:
                        s["skip"] = True
                        s["full"].append(False)
                        return (x[:, :16] + s["diffs"][branch],)
                    s["cumulative"] = 0.0
        out = original(*args, **kwargs)[0]
        s["full"].append(True)
        if leader and s["norm"] is not None:
            output_change = (sub(out) - s["out_prev"]).abs().mean()
            if input_change is not None:
                s["rate"] = output_change / input_change
        s["diffs"][branch] = out - x[:, :16]
        if leader:
            s["x_prev"], s["out_prev"], s["norm"] = sub(x[:, :16]).clone(), sub(out).clone(), out.abs().mean()
        return (out,)

    transformer.forward = forward
    return s
