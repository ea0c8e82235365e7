"""`vidax-convert hunyuanvideo-1.5 --source CKPTS --variant V --out DIR`, then `vidax-gen hunyuanvideo-1.5 --weights DIR`.

CKPTS is a local folder in the official layout (tencent/HunyuanVideo-1.5 plus the encoder repos where its
checkpoints-download.md puts them): transformer/<variant>/ and vae/ in the official key names,
text_encoder/llm (Qwen2.5-VL), text_encoder/byt5-small (tokenizer and config), text_encoder/Glyph-SDXL-v2
(byt5_model.pt with added colour/font tokens, and their assets) and vision_encoder/siglip (SigLIP with its
feature extractor). Every tower is a tiny perturbed transformers / diffusers reference. The converted
folder must generate what the unconverted folder generates, and record the variant it was converted for.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from vidax.translator.models import MODEL_FILE, ConvertOptions, convert_model as run
from vidax.translator import SourceError, load
from vidax.translator.output import read_manifest
from vidax.translator.registry import get_model
from vidax.translator.testing import mismatches
from vidax.zoo.generator.generation import generate_video
from vidax.zoo.hunyuan_video15.family import glyph_tokens
from vidax.zoo.registry import make_pipeline
from vidax.zoo.generator.options import GenerateOptions

from tests.oracle import perturb, repo_files, save_state

from .hunyuan_spec_fixtures import (dit_reference, expected_tree, official_dit_state, official_vae_state, transformer_cases,
                                    vae_cases, vae_reference)
from .pipelines import saved, towers  # noqa: F401  (module fixtures: a tiny diffusers pipeline folder, its text towers)

import transformers

PROMPT = 'a neon sign that says "OPEN" above a door'
COLORS = {"white": 0, "black": 1, "red": 2}
FONTS = {"en-Montserrat": 0, "en-Roboto": 1, "zh-Song": 0}


@pytest.fixture(scope="module")
def ckpts(towers, tmp_path_factory):  # noqa: F811
    """The official ckpts/ folder with both 480p transformer folders; returns (root, reference state dicts)."""
    from tests.encoders.test_t5 import glyph_checkpoint

    _, text_root = towers
    root = tmp_path_factory.mktemp("hv15_ckpts")
    dit = dit_reference(in_channels=9, out_channels=4, text_embed_dim=32, text_embed_2_dim=20, image_embed_dim=12,
                        target_size=32, use_meanflow=False)
    config = {k: v for k, v in dict(dit.config).items() if not k.startswith("_")}
    for variant in ("480p_t2v", "480p_i2v"):
        save_state(official_dit_state(dit.state_dict()), root / "transformer" / variant, config)
    vae = vae_reference()
    vae_json = {"in_channels": 3, "out_channels": 3, "latent_channels": 4, "block_out_channels": [8, 16, 16, 16, 16],
                "layers_per_block": 1, "ffactor_spatial": 16, "ffactor_temporal": 4, "sample_size": 256,
                "sample_tsize": 64, "scaling_factor": 1.03682}  # hyvideo's own VAE config names
    save_state(official_vae_state(vae.state_dict()), root / "vae", vae_json)
    # Qwen2.5-VL-7B-Instruct: weights, config and tokenizer files in one folder
    shutil.copytree(text_root / "text_encoder", root / "text_encoder" / "llm")
    for path in (text_root / "tokenizer").iterdir():
        shutil.copy(path, root / "text_encoder" / "llm")
    # google/byt5-small (tokenizer, config of 384 ids) + Glyph-SDXL-v2 (weights with the added tokens)
    small = root / "text_encoder" / "byt5-small"
    shutil.copytree(text_root / "tokenizer_2", small)
    sizes = dict(d_model=20, d_kv=8, d_ff=32, num_layers=2, num_heads=2, feed_forward_proj="gated-gelu",
                 relative_attention_num_buckets=8, relative_attention_max_distance=16)
    (small / "config.json").write_text(json.dumps(transformers.T5Config(vocab_size=384, **sizes).to_dict()))
    added = glyph_tokens(COLORS, FONTS)
    byt5 = perturb(transformers.T5EncoderModel(transformers.T5Config(vocab_size=384 + len(added), **sizes)), 5)
    glyph = root / "text_encoder" / "Glyph-SDXL-v2"
    glyph_checkpoint(byt5, glyph / "checkpoints" / "byt5_model.pt", wrapped=True)
    (glyph / "assets").mkdir()
    (glyph / "assets" / "color_idx.json").write_text(json.dumps(COLORS))
    (glyph / "assets" / "multilingual_10-lang_idx.json").write_text(json.dumps(FONTS))
    # FLUX.1-Redux-dev's SigLIP: image_encoder/ and feature_extractor/
    siglip = perturb(transformers.SiglipVisionModel(transformers.SiglipVisionConfig(
        hidden_size=12, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8)), 4)
    siglip.save_pretrained(root / "vision_encoder" / "siglip" / "image_encoder")
    transformers.SiglipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(
        root / "vision_encoder" / "siglip" / "feature_extractor")
    return root, {"transformer": dit.state_dict(), "vae": vae.state_dict()}, (dit, vae, byt5)


def generate(weights, tmp_path, model="hunyuanvideo-1.5", image=None, **extra):
    """One seeded tiny run (2 steps, 5 frames); T2V at 32x48, I2V at the image's bucket (32x32 at target 32)."""
    grid = (2, 2) if image is not None else (2, 3)
    latents = torch.randn(1, 4, 2, *grid, generator=torch.Generator().manual_seed(0)).numpy()
    np.save(tmp_path / "noise.npy", latents)
    size = {} if image is not None else {"height": 32, "width": 48}
    options = GenerateOptions(model=model, prompt=PROMPT, weights=str(weights), frames=5, steps=2, image=image,
                              latents=tmp_path / "noise.npy", out=tmp_path / "out.npy", compile_cache=False,
                              dtype="float32", **size, **extra)
    return generate_video(make_pipeline(options.model, options), options)


def test_registry_variants():
    entry = get_model("hunyuanvideo-1.5")
    assert entry.variant == entry.default_variant == "480p_t2v" and len(entry.choices) == 9
    assert "image_encoder" not in entry.components  # a T2V conversion fetches no SigLIP
    i2v = entry.select("720p_i2v")
    assert i2v.components["transformer"].subfolder["official"] == "transformer/720p_i2v"
    assert i2v.components["image_encoder"].folder("official", local=True) == "vision_encoder/siglip/image_encoder"
    assert i2v.components["image_encoder"].repo["official"] == "black-forest-labs/FLUX.1-Redux-dev"
    assert i2v.repos["diffusers"].endswith("720p_i2v")
    alias = get_model("hunyuanvideo-1.5-720p-i2v")  # the per-variant names of earlier releases
    assert alias.variant == "720p_i2v" and alias.components == i2v.components and alias.alias_of == entry.name
    assert get_model("hunyuanvideo-1.5-480p-t2v").alias_of == entry.name and entry.alias_of is None
    assert alias.settings["shift"] == 7.0 and alias.settings["frames"] == 121  # variant over model settings
    step = get_model("hunyuanvideo-1.5-480p-i2v-step-distilled")  # hyvideo PIPELINE_CONFIGS: 12 steps, shift 7, no CFG
    assert step.components["transformer"].subfolder["official"] == "transformer/480p_i2v_step_distilled"
    assert (step.settings["steps"], step.settings["shift"], step.settings["guidance"]) == (12, 7.0, 1.0)
    assert step.config["transformer"]["use_meanflow"] and entry.settings["steps"] == 50
    with pytest.raises(SourceError, match="no variant '720p'"):
        entry.select("720p")


def test_hub_sources_per_component(tmp_path):
    """Without --source each component comes from its own repo, only the selected variant's folder."""
    from vidax.translator.models import _attempts, _open

    entry = get_model("hunyuanvideo-1.5").select("720p_i2v")
    opts = ConvertOptions(model="hunyuanvideo-1.5", variant="720p_i2v")
    tries = {name: _attempts(entry, entry.components[name], opts) for name in ("transformer", "text_encoder", "image_encoder")}
    assert tries == {"transformer": [("official", "tencent/HunyuanVideo-1.5", "transformer/720p_i2v")],
                     "text_encoder": [("official", "Qwen/Qwen2.5-VL-7B-Instruct", None)],
                     "image_encoder": [("official", "black-forest-labs/FLUX.1-Redux-dev", "image_encoder")]}
    diffusers = _attempts(entry, entry.components["text_encoder"], ConvertOptions(model="x", layout="diffusers"))
    assert diffusers == [("diffusers", "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-720p_i2v", "text_encoder")]
    # Glyph-SDXL-v2 is on ModelScope only: from the Hub, ByT5 comes from the variant's diffusers mirror
    mirror = "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-720p_i2v"
    for name in ("text_encoder_2", "tokenizer_2"):
        assert _attempts(entry, entry.components[name], opts) == [("diffusers", mirror, name)]
    # a local official folder still has it at its mount; one without it gets the download command
    local = _attempts(entry, entry.components["text_encoder_2"], ConvertOptions(model="x", source=str(tmp_path)))
    assert local == [(None, str(tmp_path), "text_encoder/Glyph-SDXL-v2/checkpoints"), (None, str(tmp_path), "text_encoder_2")]
    with pytest.raises(SourceError, match="modelscope download --model AI-ModelScope/Glyph-SDXL-v2"):
        _open(entry, "text_encoder_2", ConvertOptions(model="x", source=str(tmp_path)))


def test_convert_then_generate_t2v(ckpts, towers, tmp_path):  # noqa: F811
    from diffusers import ClassifierFreeGuidance, FlowMatchEulerDiscreteScheduler, HunyuanVideo15Pipeline as Reference

    root, states, (dit, vae, byt5) = ckpts
    out = tmp_path / "ckpt"
    run(ConvertOptions(model="hunyuanvideo-1.5", source=str(root), variant="480p_t2v", out=out, dtype="float32"))
    for component in ("transformer", "vae"):
        assert mismatches(load(out / component), expected_tree(states[component])) == [], component
    assert {p.name for p in out.iterdir()} == {"transformer", "vae", "text_encoder", "tokenizer", "text_encoder_2",
                                              "tokenizer_2", MODEL_FILE}
    assert read_manifest(out / "transformer")["variant"] == "480p_t2v"
    assert json.loads((out / MODEL_FILE).read_text())["tags"] == ["480p", "t2v"]

    converted = generate(out, tmp_path)
    unconverted = generate(root, tmp_path)
    assert converted.frames.shape == (5, 32, 48, 3)
    np.testing.assert_allclose(converted.frames, unconverted.frames, atol=1e-6, rtol=0)  # same fp32 trees, same code
    assert converted.settings["shift"] == 5.0 and converted.settings["guidance"] == 6.0

    # anchor: diffusers' pipeline on the same towers (ByT5 with the official added tokens)
    tokenizer_2 = transformers.AutoTokenizer.from_pretrained(root / "text_encoder" / "byt5-small")
    tokenizer_2.add_tokens(glyph_tokens(COLORS, FONTS), special_tokens=True)
    text_ref, _ = towers
    ref = Reference(text_encoder=text_ref.text_encoder, tokenizer=text_ref.tokenizer, transformer=dit, vae=vae,
                    scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0), text_encoder_2=byt5, tokenizer_2=tokenizer_2,
                    guider=ClassifierFreeGuidance(guidance_scale=6.0))
    with torch.no_grad():
        expected = ref(prompt=PROMPT, latents=torch.from_numpy(np.load(tmp_path / "noise.npy")), height=32, width=48,
                       num_frames=5, num_inference_steps=2, output_type="np").frames[0]
    np.testing.assert_allclose(converted.frames, expected, atol=1e-5, rtol=0)


def test_hub_convert_then_generate(ckpts, tmp_path, monkeypatch):
    """`vidax-convert hunyuanvideo-1.5 --out DIR`, nothing else, through an offline huggingface_hub cache holding
    what the Hub holds: DiT and VAE from tencent/HunyuanVideo-1.5, Qwen2.5-VL from its repo, and ByT5 with the
    colour/font tokens from the variant's diffusers mirror (the official Glyph-SDXL-v2 is on ModelScope, and
    google/byt5-small is not needed). The result generates what the official ckpts/ folder generates."""
    import huggingface_hub.constants

    from vidax.translator.testing import make_hub_cache

    root, states, (_, _, byt5) = ckpts
    cache = tmp_path / "hub"
    official = {**repo_files(root / "transformer", "transformer/"), **repo_files(root / "vae", "vae/")}
    make_hub_cache(cache, "tencent/HunyuanVideo-1.5", official)
    make_hub_cache(cache, "Qwen/Qwen2.5-VL-7B-Instruct", repo_files(root / "text_encoder" / "llm"))
    mirror = tmp_path / "mirror"  # what diffusers' converter writes: Glyph weights, tokenizer with the tokens
    byt5.save_pretrained(mirror / "text_encoder_2")
    tokenizer_2 = transformers.AutoTokenizer.from_pretrained(root / "text_encoder" / "byt5-small")
    tokenizer_2.add_tokens(glyph_tokens(COLORS, FONTS), special_tokens=True)
    tokenizer_2.save_pretrained(mirror / "tokenizer_2")
    make_hub_cache(cache, "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v", repo_files(mirror))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))

    out = tmp_path / "ckpt"
    run(ConvertOptions(model="hunyuanvideo-1.5", out=out, dtype="float32"))
    for component in ("transformer", "vae"):
        assert mismatches(load(out / component), expected_tree(states[component])) == [], component
    assert read_manifest(out / "text_encoder_2")["source"]["repo"].endswith("Diffusers-480p_t2v")
    record = json.loads((out / MODEL_FILE).read_text())
    assert record["variant"] == "480p_t2v" and record["component_layouts"]["text_encoder_2"] == "diffusers"
    assert record["component_layouts"]["transformer"] == "official"
    np.testing.assert_allclose(generate(out, tmp_path).frames, generate(root, tmp_path).frames, atol=1e-6, rtol=0)
    # naming the registry's repo is the registry's way: every component still from its own repo
    run(ConvertOptions(model="hunyuanvideo-1.5", source="tencent/HunyuanVideo-1.5", check=True))


def test_convert_then_generate_i2v(ckpts, tmp_path):
    """The converted folder records 480p_i2v: `vidax-gen hunyuanvideo-1.5 --weights DIR` then wants --image."""
    from PIL import Image

    root, _, _ = ckpts
    out = tmp_path / "ckpt"
    run(ConvertOptions(model="hunyuanvideo-1.5", source=str(root), variant="480p_i2v", out=out, dtype="float32"))
    assert (out / "image_encoder" / "config.json").is_file()
    assert (out / "feature_extractor" / "preprocessor_config.json").is_file()
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (30, 52, 3), dtype=np.uint8)).save(tmp_path / "first.png")
    with pytest.raises(Exception, match="image-to-video"):
        generate(out, tmp_path)
    converted = generate(out, tmp_path, image=tmp_path / "first.png")
    unconverted = generate(root, tmp_path, model="hunyuanvideo-1.5-480p-i2v", image=tmp_path / "first.png")
    np.testing.assert_allclose(converted.frames, unconverted.frames, atol=1e-6, rtol=0)


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    built = tmp_path_factory.mktemp("hv15_cli_cases")
    return {"transformer": transformer_cases(built / "t"), "vae": vae_cases(built / "v")}


@pytest.mark.parametrize("layout", ["official", "diffusers"])
def test_convert_transformer_and_vae_of_either_layout(cases, layout, tmp_path):
    # Assemble the repo folder as it ships: official keeps the DiT under transformer/<variant>/.
    root = tmp_path / "repo"
    dit = next(c for c in cases["transformer"] if c.name == layout)
    vae = next(c for c in cases["vae"] if c.name == layout)
    dit_folder = root / ("transformer/480p_t2v" if layout == "official" else "transformer")
    dit_folder.mkdir(parents=True)
    dit_file = dit.source / ("" if layout == "official" else "transformer") / "diffusion_pytorch_model.safetensors"
    shutil.copy(dit_file, dit_folder)
    (dit_folder / "config.json").write_text("{}")
    shutil.copytree(vae.source / "vae", root / "vae")
    (root / "vae" / "config.json").write_text("{}")

    run(ConvertOptions(model="hunyuanvideo-1.5", source=str(root), out=tmp_path / "out", dtype="float32",
                              components=("transformer", "vae")))
    for component, case in (("transformer", dit), ("vae", vae)):
        assert mismatches(load(tmp_path / "out" / component), case.expected) == [], component
        assert (tmp_path / "out" / component / "config.json").is_file()


def test_convert_diffusers_pipeline_folder(saved, tmp_path):  # noqa: F811
    """A diffusers-layout repo (save_pretrained) converts whole, configs and tokenizers included, and generates
    what the reference pipeline does."""
    ref, root = saved
    out = tmp_path / "ckpt"
    run(ConvertOptions(model="hunyuanvideo-1.5", source=str(root), out=out, dtype="float32"))
    assert json.loads((out / MODEL_FILE).read_text())["layout"] == "diffusers"
    assert (out / "tokenizer_2" / "tokenizer_config.json").is_file() and (out / "text_encoder" / "config.json").is_file()
    result = generate(out, tmp_path)
    with torch.no_grad():
        expected = ref(prompt=PROMPT, latents=torch.from_numpy(np.load(tmp_path / "noise.npy")), height=32, width=48,
                       num_frames=5, num_inference_steps=2, output_type="np").frames[0]
    np.testing.assert_allclose(result.frames, expected, atol=1e-5, rtol=0)


def test_gated_vision_encoder_names_the_mirror(monkeypatch):
    """FLUX.1-Redux-dev (the official SigLIP's repo) is gated: the error says what to do, and that the
    variant's diffusers mirror carries every component."""
    from vidax.translator.fetch import sources

    from vidax.translator.errors import GatedRepoError

    def gated(repo, patterns, revision=None, subfolder=None):
        raise GatedRepoError(f"{repo} is gated: accept its terms on huggingface.co/{repo} and set HF_TOKEN")

    monkeypatch.setattr(sources, "download", gated)
    with pytest.raises(SourceError, match=r"FLUX.1-Redux-dev is gated.*--layout diffusers "
                                          r"\(hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_i2v\)"):
        run(ConvertOptions(model="hunyuanvideo-1.5", variant="480p_i2v", components=("image_encoder",), check=True))
