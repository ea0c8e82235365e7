"""The registry's `config.<component>` tables: config.json entries as data, null entries through `_null`."""

from __future__ import annotations

import re

import pytest

from vidax.translator import SpecError
from vidax.translator.registry import get_model, load_registry


def _registry(tmp_path, table: str):
    (tmp_path / "fam").mkdir()
    (tmp_path / "fam" / "models.toml").write_text(
        '[models.m]\nrepos = { d = "d/m" }\ncomponents.transformer = { spec = "wan/transformer" }\n'
        f"[models.m.config.transformer]\n{table}\n")
    return load_registry(tmp_path)


def test_null_entries_become_none(tmp_path):
    config = _registry(tmp_path, 'num_layers = 2\n_null = ["extra_pos_embed_type", "sample_size"]')["m"].config
    assert config["transformer"] == {"num_layers": 2, "extra_pos_embed_type": None, "sample_size": None}


@pytest.mark.parametrize("table, error", [
    ('_null = "extra_pos_embed_type"', "_null must be a list of entry names"),
    ('num_layers = 2\n_null = ["num_layers"]', "num_layers both null (_null) and given a value"),
])
def test_bad_null_lists_are_refused(tmp_path, table, error):
    with pytest.raises(SpecError, match=re.escape(error)):
        _registry(tmp_path, table)


@pytest.mark.parametrize("name", ["cosmos-predict2.5-2b", "cosmos-predict2.5-14b"])
def test_cosmos_predict25_has_no_learnable_position_tables(name):
    """The converter's config (convert_cosmos_to_diffusers.py) sets extra_pos_embed_type None: the released
    weights hold no `learnable_pos_embed`, and `--plan` must not count one (diffusers' default is "learnable")."""
    from vidax.zoo.cosmos.config import CosmosTransformerConfig
    from vidax.zoo.cosmos.transformer import CosmosTransformer

    config = get_model(name).config["transformer"]
    assert "extra_pos_embed_type" in config and config["extra_pos_embed_type"] is None
    shapes = CosmosTransformer(CosmosTransformerConfig.from_hf_config(config)).param_shapes()
    assert not any(path.startswith("learnable_pos_embed/") for path in shapes)
