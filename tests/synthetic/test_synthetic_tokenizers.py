"""Stand-in tokenizers of every text-encoder kind a registry model has (`vidax.zoo.parts.synthetic_tokenizer`): built
from the model's recorded encoder config, each loads with `load_tokenizer`, has exactly the encoder's number of ids,
puts its prompt templates' markers at the real tokenizer's ids, and goes through the family's own prompt code."""

from __future__ import annotations

from pathlib import Path

import pytest

from vidax.translator.registry import get_model
from vidax.zoo.parts.encoders.tokenizer import load_tokenizer, qwen_chat_prompt, special_tokens
from vidax.zoo.parts.synthetic_tokenizer import TOKENIZERS, write_tokenizer
from vidax.zoo.plan.synthetic import SyntheticOptions, component_configs, write_synthetic


def _folder(tmp_path: Path, model: str, component: str = "text_encoder"):
    entry = get_model(model)
    config = component_configs(entry)[component]
    write_tokenizer(entry.components[component].spec, config, tmp_path, lambda path, text: path.write_text(text))
    return load_tokenizer(tmp_path), config


def _vocab(config) -> int:
    return int((config.get("text_config") or config)["vocab_size"])


def test_llama_template_of_hunyuanvideo(tmp_path):
    from vidax.zoo.hunyuan_video.text import T2V_TEMPLATE

    tok, config = _folder(tmp_path, "hunyuanvideo")
    assert tok.backend.get_vocab_size() == _vocab(config)
    batch = tok([T2V_TEMPLATE.template.format("a red kite")], max_length=256 + T2V_TEMPLATE.crop_start)
    ids = batch.input_ids[0]
    assert ids[0] == 128000 and ids[1] == 128006 and 128007 in ids  # <|begin_of_text|>, the header markers
    assert ids.max() < _vocab(config) and batch.input_ids.shape == (1, 256 + T2V_TEMPLATE.crop_start)


def test_clip_pools_at_its_end_token(tmp_path):
    tok, config = _folder(tmp_path, "hunyuanvideo", "text_encoder_2")
    batch = tok(["a red kite"], max_length=77)
    ids = batch.input_ids[0]
    assert ids[0] == _vocab(config) - 2 and ids.shape == (77,)
    assert ids.argmax() == batch.attention_mask[0].sum() - 1 and ids[ids.argmax()] == _vocab(config) - 1  # the pooled token


def test_llava_image_marker(tmp_path):
    from vidax.zoo.hunyuan_video.text import I2V_TEMPLATE

    tok, config = _folder(tmp_path, "hunyuanvideo-i2v")
    ids = tok([I2V_TEMPLATE.template.format("a red kite")], max_length=1024).input_ids[0]
    assert (ids == config["image_token_index"]).sum() == 1 and (ids == 128007).sum() == 3


def test_qwen_chat_of_hunyuanvideo15_and_cosmos(tmp_path):
    from vidax.zoo.cosmos.text import PromptTokenizer

    (tmp_path / "hv15").mkdir()
    tok, config = _folder(tmp_path / "hv15", "hunyuanvideo-1.5")
    ids = tok([qwen_chat_prompt("system", "a red kite")], max_length=64, add_special_tokens=False).input_ids[0]
    assert ids[0] == 151644 and (ids == 151645).sum() == 2 and ids.max() < _vocab(config)
    (tmp_path / "cosmos").mkdir()
    _folder(tmp_path / "cosmos", "cosmos-predict2.5-2b")
    ids = PromptTokenizer(tmp_path / "cosmos")(["a red kite"])[0]  # renders the folder's chat template
    assert ids[0] == 151644 and (ids == 151645).sum() == 2 and ids[-1] == 151643  # padded with <|endoftext|>


def test_gemma_bos_for_ltx2(tmp_path):
    from vidax.zoo.ltx2.text import prompt_tokens

    tok, config = _folder(tmp_path, "ltx-2")
    bos = tok.backend.token_to_id(special_tokens(tmp_path)["bos_token"])
    batch = prompt_tokens(tok, ["a red kite"], bos_id=bos, max_length=128)
    real = batch.input_ids[0][batch.attention_mask[0].astype(bool)]
    assert bos == 2 and real[0] == 2 and (real == 2).sum() == 1 and real.max() < _vocab(config)


# one registry model per text-encoder kind added for it (Llama and CLIP, LLaVA with an image processor read with
# defaults, Qwen2.5-VL and ByT5 with SigLIP's feature extractor, Qwen2.5-VL alone, Gemma 3)
KINDS = ["hunyuanvideo", "hunyuanvideo-i2v", "hunyuanvideo-1.5-480p-i2v", "cosmos-predict2.5-2b", "ltx-2"]


@pytest.mark.parametrize("model", KINDS)
def test_each_kind_plans_a_whole_synthetic_folder(model):
    plan = write_synthetic(SyntheticOptions(model=model, check=True))
    encoders = [name for name in plan.trees if name.startswith("text_encoder")]
    assert encoders and all(name.replace("text_encoder", "tokenizer") in plan.tokenizers for name in encoders)


def test_a_component_without_a_stand_in_is_refused_in_one_line(monkeypatch):
    """A files-only component with no recorded config and no tokenizer of a known kind (a user's own model's):
    one line. Every registry model has its stand-ins (LTX-Video-13B-distilled's scheduler is optional; Cosmos3's
    tokenizer comes from its DiT's config and its pipeline flags are recorded)."""
    import dataclasses

    from vidax.translator.registry import Component
    from vidax.zoo.plan import synthetic

    entry = get_model("wan2.1-t2v-1.3b")
    extra = Component("feature_bank", None, {"diffusers": "feature_bank"})
    patched = dataclasses.replace(entry, components={**entry.components, "feature_bank": extra})
    monkeypatch.setattr(synthetic, "get_model", lambda name: patched)
    with pytest.raises(Exception, match="no synthetic stand-in for feature_bank") as caught:
        write_synthetic(SyntheticOptions(model="wan2.1-t2v-1.3b", check=True))
    assert "\n" not in str(caught.value)
    assert set(TOKENIZERS) >= {"encoders/decoder", "encoders/gemma", "encoders/llava", "encoders/clip_text"}


def test_cosmos3_reads_its_ids_through_a_stand_in_built_from_its_dit(tmp_path):
    """Cosmos3 has no text encoder: its DiT's embedding table (`vocab_size`) sizes the stand-in, written to
    `text_tokenizer/`, and the family's prompt code renders the chat and ends with EOS and `<|vision_start|>`."""
    from vidax.zoo.cosmos3.text import PromptTokenizer
    from vidax.zoo.plan.synthetic import synthetic_plan

    plan = synthetic_plan(SyntheticOptions("cosmos3-nano"))
    assert plan.configs["model_index.json"] == {"default_use_system_prompt": True, "use_native_flow_schedule": False}
    spec, config = plan.tokenizers["text_tokenizer"]
    write_tokenizer(spec, config, tmp_path, lambda path, text: path.write_text(text))
    tok = PromptTokenizer(tmp_path, use_system_prompt=True)
    assert tok.tokenizer.backend.get_vocab_size() == config["vocab_size"]
    cond, uncond = tok("a red kite", "", num_frames=93, height=704, width=1280, fps=24)
    assert cond[-1] == 151652 and cond[-2] == tok.eos_id and cond.count(151644) == 3  # system, user, assistant
    assert max(cond + uncond) < config["vocab_size"] and cond != uncond
