"""The API's model bounds admit a 1e9-parameter Llama and refuse absurd ones with one line
(issue 12, item 4); the parameter count the API and the form check is the model's own."""

from __future__ import annotations

from typing import Any

import pytest

from syncline.api.errors import ApiError
from syncline.api.prepare import check_request, model_parameter_count
from syncline.api.schemas import CORPUS_BOUNDS, MODEL_BOUNDS, PrepareRequest
from syncline.api.template import default_spec
from syncline.errors import SpecError
from syncline.modality.language import LanguageAdapter, llama_parameter_count
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.spec import MAX_PARAM_COUNT, MAX_SHARDS, TrainingTaskSpec
from syncline.sponsor.task_defaults import TaskDefaults

NOW = 1_700_000_000
WITNESSES = [f"0x{i:040x}" for i in range(1, 4)]
# TinyLlama-1.1B's shape: 1,100,048,384 parameters.
TINY_LLAMA = {
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 22,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
}


def request(model: dict[str, Any], *, vocab_size: int = 32000, shard_count: int = 3) -> PrepareRequest:
    spec = default_spec(TaskDefaults(), WITNESSES, NOW)
    for name in ("modality", "model", "dataset", "initial_state_root"):
        spec.pop(name, None)
    return PrepareRequest.model_validate(
        {
            "spec": spec,
            "corpus": {"shard_count": shard_count, "vocab_size": vocab_size, "seq_len": 64},
            "model": {"family": "llama", **model},
        }
    )


@pytest.mark.parametrize(
    "config",
    [
        {"hidden_size": 16, "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "tie_word_embeddings": True, "vocab_size": 300},
        {"hidden_size": 24, "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 6,
         "num_key_value_heads": 6, "tie_word_embeddings": False, "vocab_size": 512},
        {"hidden_size": 32, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 8,
         "num_key_value_heads": 1, "tie_word_embeddings": True, "vocab_size": 260},
    ],
)  # fmt: skip
def test_the_parameter_count_is_the_built_models(config: dict[str, Any]) -> None:
    model = LanguageAdapter().build_model({"family": "llama", "max_position_embeddings": 64, **config}, seed=0)
    params = dict(model.named_parameters())
    assert llama_parameter_count(**config) == ParameterLayout.from_state_dict(params).numel


def test_a_billion_parameter_model_passes_every_check_before_anything_is_built() -> None:
    req = request(TINY_LLAMA)
    assert model_parameter_count(req) == 1_100_048_384
    check_request(req, NOW)  # no ApiError: nothing is built here
    spec = TrainingTaskSpec.from_mapping(
        {**check_request(req, NOW), "modality": "language", "model": {"family": "llama", "config": {}},
         "dataset": {"shard_hashes": ["0x" + "11" * 32] * 3}, "initial_state_root": "0x" + "11" * 32,
         "param_count": 1_100_048_384}
    )  # fmt: skip
    spec.validate(now=NOW)


def test_bounds_admit_a_billion_parameters_and_the_spec_maximum_of_shards() -> None:
    assert MODEL_BOUNDS["hidden_size"][1] >= 2048 and MODEL_BOUNDS["num_hidden_layers"][1] >= 22
    assert CORPUS_BOUNDS["shard_count"][1] == MAX_SHARDS
    assert CORPUS_BOUNDS["vocab_size"][1] == 1 << 16  # token shards are uint16
    req = request(TINY_LLAMA, shard_count=MAX_SHARDS)
    check_request(req, NOW)
    assert MAX_PARAM_COUNT >= 1_000_000_000


def test_an_absurd_model_is_refused_with_one_line() -> None:
    giant = {**TINY_LLAMA, "hidden_size": 8192, "intermediate_size": 32768, "num_hidden_layers": 128}
    giant["num_attention_heads"] = 64
    with pytest.raises(ApiError) as err:
        check_request(request(giant), NOW)
    assert err.value.status == 422
    assert "exceed the limit of 2,000,000,000" in err.value.message and "\n" not in err.value.message
    with pytest.raises(SpecError, match="exceeds 2000000000, the largest model"):
        draft = TrainingTaskSpec.from_mapping(
            {**check_request(request(TINY_LLAMA), NOW), "modality": "language",
             "model": {"family": "llama", "config": {}}, "dataset": {"shard_hashes": ["0x" + "11" * 32] * 3},
             "initial_state_root": "0x" + "11" * 32, "param_count": MAX_PARAM_COUNT + 1}
        )  # fmt: skip
        draft.validate(now=NOW)
