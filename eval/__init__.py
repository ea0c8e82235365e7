"""vidax.eval: video quality metrics in JAX (`vidax-eval`): FVD, CLIP score and VBench's dimensions, their networks'
weights read through vidax's translator (`conversion_specs/eval/`). docs/EVAL.md has the details."""

from vidax.eval.api import DEFAULT_METRICS, METRICS, EvalOptions, EvalResult, evaluate
from vidax.eval.errors import EvalError

__all__ = ["DEFAULT_METRICS", "METRICS", "EvalError", "EvalOptions", "EvalResult", "evaluate"]
