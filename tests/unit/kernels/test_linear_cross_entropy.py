import pytest
import torch

from computeall.kernels import linear_cross_entropy
from computeall.kernels import lce_chunked
from computeall.kernels.lce_chunked import linear_cross_entropy_chunked
from computeall.kernels.lce_reference import linear_cross_entropy_reference
from computeall.network.ops import tied_head

from .helpers import check_linear_cross_entropy


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few rows, so every test crosses several chunk boundaries (and a ragged last one), and
    the weight's gradient in blocks of a few rows (a ragged last one too)."""
    monkeypatch.setattr(tied_head, "LOGITS_CHUNK_ELEMENTS", 3 * 1000)
    monkeypatch.setattr(lce_chunked, "GRAD_BLOCK_ELEMENTS", 7 * 64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n,d,vocab", [(1, 32, 10), (37, 64, 1000), (64, 48, 777)])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_chunked_matches_reference(small_chunks, n, d, vocab, dtype, reduction):
    check_linear_cross_entropy(linear_cross_entropy_chunked, n, d, vocab, dtype, reduction)


@pytest.mark.parametrize("impl", ["reference", "chunked", "builtin"])
def test_dispatcher_impls(impl):
    lce = lambda x, w, t, ii, red: linear_cross_entropy(x, w, t, ii, red, impl=impl)  # noqa: E731
    check_linear_cross_entropy(lce, 50, 32, 500, torch.float32, "mean")


def test_batched_leading_dims():
    x = torch.randn(2, 5, 16, requires_grad=True)
    w = torch.randn(40, 16, requires_grad=True)
    t = torch.randint(0, 40, (2, 5))
    torch.testing.assert_close(linear_cross_entropy(x, w, t, impl="chunked"), linear_cross_entropy_reference(x, w, t))


def test_tied_embedding_weight_accumulates_both_gradients(small_chunks):
    vocab, d, n = 300, 16, 23
    weight = torch.randn(vocab, d, requires_grad=True)
    tokens = torch.randint(0, vocab, (n,))
    targets = torch.randint(0, vocab, (n,))

    def loss_with(lce):
        hidden = torch.nn.functional.embedding(tokens, weight).tanh()  # (N, D), embedding uses the same weight
        return lce(hidden, weight, targets)

    (expected,) = torch.autograd.grad(loss_with(linear_cross_entropy_reference), weight)
    (got,) = torch.autograd.grad(loss_with(linear_cross_entropy_chunked), weight)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_all_ignored_gives_zero_loss_and_grads():
    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(10, 8, requires_grad=True)
    loss = linear_cross_entropy_chunked(x, w, torch.full((4,), -100))
    loss.backward()
    assert loss.item() == 0.0 and x.grad.abs().sum() == 0 and w.grad.abs().sum() == 0


def test_rejects_bad_arguments():
    x, w, t = torch.randn(4, 8), torch.randn(10, 8), torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError):
        linear_cross_entropy(x, w, t, reduction="none", impl="chunked")
    with pytest.raises(ValueError):
        linear_cross_entropy(x, w[:, :4], t, impl="chunked")


def test_backward_scales_by_the_loss_gradient_once():
    """backward scales the gradients saved in forward in place: right for any grad_output, and a
    second backward through the same graph is refused rather than scaled twice."""
    x = torch.randn(12, 16, requires_grad=True)
    w = torch.randn(50, 16, requires_grad=True)
    t = torch.randint(0, 50, (12,))
    expected = torch.autograd.grad(linear_cross_entropy_reference(x, w, t) * 3.0, (x, w))
    loss = linear_cross_entropy_chunked(x, w, t)
    got = torch.autograd.grad(loss, (x, w), grad_outputs=torch.tensor(3.0), retain_graph=True)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-4)
    with pytest.raises(RuntimeError, match="inplace"):
        torch.autograd.grad(loss, (x, w), grad_outputs=torch.tensor(3.0))
