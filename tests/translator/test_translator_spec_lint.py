"""The spec linter rejects broken specs at load time; the translator imports without jax/flax/torch/zoo."""

from __future__ import annotations

import subprocess
import sys
import re
import textwrap

import pytest

from vidax.translator import SpecError, load_spec
from vidax.translator.spec import module_path, parse_spec, shipped_specs

HEAD = """
[dtype]
default = "float32"
[rename.norm_param]
weight = "scale"
[layouts.x]
files = ["*.safetensors"]
signature = ['a\\.weight']
"""


def _rule(**fields) -> str:
    # TOML literal strings ('...') keep regex backslashes as written
    body = "\n".join(f"{k} = '{v}'" if isinstance(v, str) else f"{k} = {str(v).lower()}" for k, v in fields.items())
    return f"\n[[layouts.x.rules]]\n{body}\n"


GOOD = _rule(match=r"a\.weight", target="a/kernel", op="linear")

BROKEN = {
    "unknown op": (_rule(match=r"a\.weight", target="a/kernel", op="transpse"), "unknown op 'transpse'"),
    "bad template chars": (_rule(match=r"a\.weight", target="a.kernel"), "bad target template"),
    "unclosed field": (_rule(match=r"(?P<g>a)\.weight", target="{g/kernel"), "bad target template"),
    "undefined group": (_rule(match=r"a\.weight", target="{m}/kernel"), "target field {m} is not an available group"),
    "unknown filter": (_rule(match=r"(?P<m>a)\.weight", target="{m:nope}/kernel"), "unknown template filter 'nope'"),
    "unused group": (_rule(match=r"(?P<m>a)\.(?P<p>weight)", target="{m}/kernel"), "named group(s) p unused"),
    "stack group in target": (_rule(match=r"b\.(?P<i>\d+)", target="b_{i}", stack="i"), "not an available group"),
    "never matches": (_rule(match=r"a\.weight[^\s\S]", target="a/kernel"), "can never match"),
    "invalid regex": (_rule(match=r"a(\.weight", target="a/kernel"), "invalid regex"),
    "unknown key": (_rule(match=r"a\.weight", target="a/kernel", optinal=True), "unknown key(s) optinal"),
    "op args": (_rule(match=r"a\.weight", target="a/kernel", op="reshape"), "op 'reshape' takes ['shape']"),
    "split without part": (GOOD.replace("op = 'linear'", 'split = { axis = 0, parts = ["q", "k"] }'), "must contain {part}"),
    "overlap": (GOOD + _rule(match=r"(?P<m>[a-z])\.weight", target="{m}/w"), "both claim keys such as 'a.weight'"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_linter_rejects(case):
    rules, message = BROKEN[case]
    with pytest.raises(SpecError, match=re.escape(message)):
        parse_spec(HEAD + rules, "t")


def test_linter_rejects_dtype_typo_and_ignore_overlap():
    with pytest.raises(SpecError, match="unknown dtype 'bfloat61'"):
        parse_spec(HEAD.replace('default = "float32"', 'default = "bfloat61"') + GOOD, "t")
    with pytest.raises(SpecError, match="ignore"):
        parse_spec(HEAD.replace("signature", r"ignore = ['a\..*']" + "\nsignature") + GOOD, "t")


def test_good_spec_and_module_path():
    spec = parse_spec(HEAD + GOOD, "t")
    assert spec.layouts["x"].rules[0].op == "linear"
    assert module_path("ffn.net.0.proj") == "ffn/net_0/proj"
    assert module_path("to_out.0") == "to_out_0"
    assert module_path("up_blocks.1.resnets.0") == "up_blocks_1/resnets_0"


@pytest.mark.parametrize("name", shipped_specs())
def test_every_shipped_spec_passes_the_linter(name):
    load_spec(name)


def test_missing_spec_is_one_line():
    with pytest.raises(SpecError, match="no spec 'wan/nope'"):
        load_spec("wan/nope")


def test_translator_imports_without_jax_flax_torch_or_zoo():
    blocker = textwrap.dedent("""
        import sys
        BLOCKED = ("jax", "jaxlib", "flax", "torch", "diffusers", "transformers", "vidax.zoo")
        class Block:
            def find_spec(self, name, path=None, target=None):
                if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                    raise ImportError(f"blocked: {name}")
        sys.meta_path.insert(0, Block())
        import vidax.translator, vidax.translator.formats.torch_zip, vidax.translator.registry, vidax.translator.testing
        import vidax.translator.fetch.remote
        import vidax.cli.convert
        from vidax.translator import convert, load_spec, save_tree, load
        load_spec("wan/transformer")
        leaked = [m for m in sys.modules if any(m == b or m.startswith(b + ".") for b in BLOCKED)]
        assert not leaked, leaked
        try:
            import jax
        except ImportError:
            print("blocked-ok")
    """)
    proc = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "blocked-ok"


def test_op_arguments_are_typed():
    with pytest.raises(SpecError, match="perm must be a list of integers"):
        parse_spec(HEAD + _rule(match=r"a\.weight", target="a/kernel", op="transpose", perm="1,0"), "t")
    with pytest.raises(SpecError, match="axis must be an integer"):
        parse_spec(HEAD + _rule(match=r"a\.weight", target="a/kernel", op="squeeze", axis="0"), "t")


def test_registry_component_dtype_and_file(tmp_path, monkeypatch):
    """A component may fix its conversion dtype and name its own file; a dtype typo is a SpecError."""
    from vidax.translator import SpecError, load_registry

    def write(dtype):
        (tmp_path / "m.toml").write_text(f"""
[models."x-test"]
family = "wan"
repos = {{ official = "org/x" }}
components.transformer = {{ spec = "wan/transformer", dtype = "{dtype}", file = {{ official = "x-1.0.safetensors" }} }}
""")
    monkeypatch.setenv("VIDAX_MODELS", str(tmp_path / "m.toml"))
    write("float32")
    part = load_registry()["x-test"].components["transformer"]
    assert part.dtype == "float32" and part.files("official") == ("x-1.0.safetensors",) and part.files(None)
    write("fp32")
    with pytest.raises(SpecError, match="unknown dtype 'fp32'"):
        load_registry()
