"""The comparison side: diffusers with PyTorch SDPA on the same device, at the same shapes.

Runs as a worker process (`python -m bench.accelerator.torch_side --profile real --device cuda`)
that the runner starts once: it reads one JSON request per line on stdin and answers one line
`@@{json}` on stdout (anything else diffusers prints is ignored). A separate process keeps the two
frameworks' allocators apart, so each side's peak memory is its own, and a crash on this side
leaves the vidax figures standing.

Models are built from the same diffusers kwargs the vidax side reads (`cases.py`), with random
weights, in bf16 with diffusers' `_keep_in_fp32_modules` kept fp32 as `from_pretrained` does;
the VAEs run in fp32 like vidax's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from typing import Any

from bench.accelerator import cases, families
from bench.accelerator.timing import time_calls

RESULT_PREFIX = "@@"


class Side:
    """Torch state of the worker: device, dtype and the synchronisation used by every timing."""

    def __init__(self, profile: cases.Profile, device: str):
        import torch

        self.torch = torch
        self.profile = profile
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if not self.cuda:
            torch.set_num_threads(1)  # the CPU test shares a small machine
        torch.manual_seed(0)

    def sync(self, _result: Any = None) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def reset_peak(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()
            self.torch.cuda.reset_peak_memory_stats()

    def peak_bytes(self) -> int | None:
        return int(self.torch.cuda.max_memory_allocated()) if self.cuda else None

    def randn(self, *shape, dtype=None):
        return self.torch.randn(*shape, device=self.device, dtype=dtype or self.torch.bfloat16)

    # --- DiT -------------------------------------------------------------------------------------

    def dit(self, case: cases.DitCase, repeats: int, deadline: float) -> dict:
        self.reset_peak()
        result = self._dit(case, repeats, deadline)  # its model and inputs go when it returns
        self.reset_peak()
        return result

    def _dit(self, case: cases.DitCase, repeats: int, deadline: float) -> dict:
        torch = self.torch
        model = self._dit_model(case)
        inputs = self._dit_inputs(case)
        blocks_attr = case.row.diffusers_blocks
        blocks = getattr(model, blocks_attr)
        block_bytes = sum(p.numel() * p.element_size() for p in blocks.parameters()) / len(blocks)

        def run():
            with torch.inference_mode():
                return model(**inputs, return_dict=False)[0]

        full = time_calls(run, self.sync, repeats, deadline=deadline)
        peak = self.peak_bytes()
        setattr(model, blocks_attr, torch.nn.ModuleList())  # embed + head alone
        outside = time_calls(run, self.sync, repeats, deadline=deadline)
        return {"full": full, "outside": outside, "peak_bytes": peak, "block_weight_bytes": block_bytes,
                "attention_backend": "diffusers native (torch SDPA)"}

    def _dit_model(self, case: cases.DitCase):
        import diffusers

        torch = self.torch
        config = {**case.config, "num_layers": case.run_depth}
        with torch.device(self.device):
            model = getattr(diffusers, case.row.diffusers_dit)(**config).eval()
        model.to(torch.bfloat16)
        keep = getattr(model, "_keep_in_fp32_modules", None) or []
        for name, param in model.named_parameters():  # as from_pretrained(torch_dtype=bf16) keeps them
            if any(m in name.split(".") for m in keep):
                param.data = param.data.float()
        return model

    def _dit_inputs(self, case: cases.DitCase) -> dict:
        """The row's tensors under their diffusers keywords, filled as the vidax side fills them."""
        return {tensor.name: self._tensor(case, tensor) for tensor in case.row.inputs}

    def _tensor(self, case: cases.DitCase, tensor: families.Tensor):
        torch = self.torch
        shape = tensor.shape(case)
        dtype = getattr(torch, tensor.torch_dtype or tensor.dtype)
        if tensor.fill.startswith("valid:"):
            mask = torch.zeros(*shape, dtype=dtype, device=self.device)
            mask[:, : families.valid_length(case, tensor.fill)] = 1
            return mask
        if tensor.fill == "zeros":
            return torch.zeros(*shape, device=self.device, dtype=dtype)
        if tensor.fill == "timestep":
            return torch.full(shape, 700.0, device=self.device).to(dtype)
        return self.randn(*shape, dtype=dtype)

    # --- attention -------------------------------------------------------------------------------

    def attention(self, case: cases.AttentionCase, repeats: int, deadline: float) -> dict:
        """SDPA as diffusers calls it ([B, S, H, D] projections viewed as [B, H, S, D]), by backend."""
        torch = self.torch
        import torch.nn.functional as F

        self.reset_peak()
        q, k, v = (self.randn(case.batch, case.tokens, case.heads, case.head_dim).transpose(1, 2) for _ in range(3))
        rows = {}
        if case.valid is None:
            rows["torch SDPA (default)"] = lambda: F.scaled_dot_product_attention(q, k, v)
            if self.cuda:
                from torch.nn.attention import SDPBackend, sdpa_kernel

                for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION),
                                      ("mem-efficient", SDPBackend.EFFICIENT_ATTENTION)):
                    def run(backend=backend):
                        with sdpa_kernel(backend):
                            return F.scaled_dot_product_attention(q, k, v)
                    rows[f"torch SDPA {name}"] = run
        else:
            n = case.tokens
            mask_bytes = case.batch * n * n
            if mask_bytes <= 8e9:  # diffusers' HunyuanVideo-1.5 processor builds a [B, 1, S, S] bool mask
                valid = torch.arange(n, device=self.device) < case.valid
                mask = (valid[None, :] & valid[:, None])[None, None].expand(case.batch, 1, n, n)
                rows["torch SDPA + SxS mask (diffusers)"] = lambda: F.scaled_dot_product_attention(q, k, v, mask)
            else:
                rows["torch SDPA + SxS mask (diffusers)"] = f"not run: its [B,1,S,S] mask is {mask_bytes / 1e9:.0f} GB"
            cut = slice(0, case.valid)
            rows["torch SDPA on the valid prefix"] = lambda: F.scaled_dot_product_attention(q[:, :, cut], k[:, :, cut],
                                                                                          v[:, :, cut])
        out = {}
        for name, fn in rows.items():
            if isinstance(fn, str):
                out[name] = {"error": fn}
                continue
            try:
                out[name] = time_calls(fn, self.sync, repeats, cap_s=5.0, deadline=deadline)
            except Exception as err:  # noqa: BLE001 - an unsupported backend is a row, not a crash
                out[name] = {"error": _one_line(err)}
                self.reset_peak()
        return {"rows": out}

    # --- VAE -------------------------------------------------------------------------------------

    def vae(self, case: cases.VaeCase, repeats: int, deadline: float) -> dict:
        self.reset_peak()
        result = self._vae(case, repeats, deadline)
        self.reset_peak()
        return result

    def _vae(self, case: cases.VaeCase, repeats: int, deadline: float) -> dict:
        torch = self.torch
        config = {k: list(v) if isinstance(v, tuple) else v for k, v in case.config.items()}  # diffusers adds lists
        tile = config.pop("tile_sample_min_size", None)
        import diffusers

        with torch.device(self.device):
            vae = getattr(diffusers, case.row.diffusers_vae)(**config).eval()
        if case.row.vae_tiling:  # as the reference pipeline decodes full resolution
            if tile is None:
                vae.enable_tiling()
            else:
                vae.enable_tiling(tile_sample_min_height=tile, tile_sample_min_width=tile,
                                  tile_latent_min_height=tile // case.row.vae_spatial,
                                  tile_latent_min_width=tile // case.row.vae_spatial)
        latents = self.randn(*case.latent_shape, dtype=torch.float32)

        def run():
            with torch.inference_mode():
                return vae.decode(latents).sample

        timing = time_calls(run, self.sync, min(repeats, 2), cap_s=15.0, deadline=deadline)
        return {"decode": timing, "peak_bytes": self.peak_bytes()}


def _one_line(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".splitlines()
    return text[0][:300] if text else type(err).__name__


def handle(side: Side, request: dict) -> dict:
    """One request: `{"op": "dit"|"attention"|"vae", "key": case key, "repeats": n, "deadline": epoch s}`."""
    op, key = request["op"], request["key"]
    pool = {"dit": side.profile.dits, "attention": side.profile.attention, "vae": side.profile.vaes}[op]
    case = next(c for c in pool if c.key == key)
    started = time.time()
    try:
        result = getattr(side, op)(case, request.get("repeats", 3), request.get("deadline", time.time() + 600))
    except Exception as err:  # noqa: BLE001 - report it and stay up for the next request
        traceback.print_exc(file=sys.stderr)
        side.reset_peak()
        result = {"error": _one_line(err)}
    result["seconds"] = time.time() - started
    return result


def info(side: Side) -> dict:
    torch = side.torch
    import diffusers

    out = {"torch": torch.__version__, "diffusers": diffusers.__version__, "device": str(side.device)}
    if side.cuda:
        out["device_name"] = torch.cuda.get_device_name(side.device)
        out["sdpa_enabled"] = {name: getattr(torch.backends.cuda, f"{name}_sdp_enabled")()
                               for name in ("flash", "mem_efficient", "math", "cudnn")
                               if hasattr(torch.backends.cuda, f"{name}_sdp_enabled")}
    return out


def pick_device(device: str, profile: str) -> str:
    """`cuda` where torch sees a GPU; `cpu` only for the toy shapes (real ones would take hours)."""
    import torch

    if device != "auto":
        return device
    if torch.cuda.is_available():
        return "cuda"
    if profile == "toy":
        return "cpu"
    raise RuntimeError(f"torch {torch.__version__} sees no CUDA device: the diffusers side needs one at real shapes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="real", choices=sorted(cases.PROFILES))
    parser.add_argument("--device", default="auto", help="auto: cuda where torch sees a GPU, else cpu for toy shapes")
    args = parser.parse_args(argv)
    try:
        side = Side(cases.profile(args.profile), pick_device(args.device, args.profile))
        hello = info(side)
    except Exception as err:  # noqa: BLE001 - the runner shows why the comparison side is missing
        hello = {"error": _one_line(err)}
    print(RESULT_PREFIX + json.dumps(hello), flush=True)
    if "error" in hello:
        return 1
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("op") == "quit":
            break
        print(RESULT_PREFIX + json.dumps(handle(side, request)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
