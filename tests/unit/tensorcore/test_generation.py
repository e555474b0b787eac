"""Generation: the KV cache gives the training math, sampling is seeded, bad requests are refused."""

import pytest
import torch

from computeall.protocol.sampling import SamplingConfig
from computeall.tensorcore.generation import GenerationError, Generator, KVCache
from computeall.tensorcore.trained_model import ModelLoadError, TrainedModel

from .trained import checkpoint, network_yaml, reference_logits

YAML = network_yaml("micro-gpt")


@pytest.fixture(scope="module")
def trained():
    runtime, objects = checkpoint(YAML)
    return runtime, Generator(TrainedModel.from_checkpoint(YAML, objects))


def test_cached_logits_equal_the_training_modules_whole_sequence(trained):
    runtime, generator = trained
    tokens = torch.randint(0, 512, (1, 40), generator=torch.Generator().manual_seed(0))
    expected = reference_logits(runtime, tokens)
    cache = KVCache(generator.context)
    pieces = [generator.forward(tokens[:, :25], cache)] + [generator.forward(tokens[:, i : i + 1], cache) for i in range(25, 40)]
    assert torch.allclose(torch.cat(pieces, dim=1), expected, atol=1e-5, rtol=0)
    assert cache.length == 40


def test_greedy_picks_the_argmax_of_the_whole_sequence_each_time(trained):
    runtime, generator = trained
    prompt = [0, 17, 99, 3]
    out = list(generator.generate(prompt, SamplingConfig(max_new_tokens=12, temperature=0)))
    seq = list(prompt)
    for token in out:
        assert token == int(reference_logits(runtime, torch.tensor([seq]))[0, -1].argmax())
        seq.append(token)
    assert out == list(generator.generate(prompt, SamplingConfig(max_new_tokens=12, temperature=1.0, top_k=1)))


def test_same_seed_same_tokens_another_seed_others(trained):
    _, generator = trained
    draw = lambda seed: list(generator.generate([0, 5, 6], SamplingConfig(max_new_tokens=24, seed=seed, top_p=0.95)))
    assert draw(1) == draw(1)
    assert draw(1) != draw(2)
    assert len(draw(1)) == 24


def test_stops_at_the_stop_token_the_context_and_never_draws_past_the_tokenizer(trained):
    _, generator = trained
    first = list(generator.generate([0, 5], SamplingConfig(max_new_tokens=5, seed=3)))
    stopped = list(generator.generate([0, 5], SamplingConfig(max_new_tokens=5, seed=3, stop_token=first[1])))
    assert stopped == first[:2]
    assert len(list(generator.generate([1] * 60, SamplingConfig(max_new_tokens=50)))) == 4  # context 64
    assert all(t < 10 for t in generator.generate([1, 2], SamplingConfig(max_new_tokens=30, vocab_size=10, seed=4)))


def test_refusals_say_what_to_do(trained):
    _, generator = trained
    with pytest.raises(GenerationError, match="prompt is 64 tokens and the network's context is 64.*at most 63"):
        next(generator.generate([1] * 64, SamplingConfig()))
    with pytest.raises(GenerationError, match="no tokens"):
        next(generator.generate([], SamplingConfig()))
    with pytest.raises(ModelLoadError, match="no embed.weight"):
        TrainedModel.from_checkpoint(YAML, {v: b for v, b in checkpoint(YAML)[1].items() if v != "embed"})
    with pytest.raises(ModelLoadError, match="not readable safetensors"):
        TrainedModel.from_checkpoint(YAML, {"embed": b"junk"})
