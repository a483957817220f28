"""Shared by the hvd.torch tests."""
import torch

# Every dtype hvd reduces, as torch names them.
DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.bool]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
NUMERIC = [d for d in DTYPES if d is not torch.bool]


def as_exact(t):
    """A tensor comparable exactly (bool and ints as int64, floats as float64)."""
    return t.to(torch.float64) if t.dtype.is_floating_point else t.to(torch.int64)


def assert_equal(actual, expected, msg=""):
    assert actual.dtype == expected.dtype, "%s: dtype %s, expected %s" % (msg, actual.dtype,
                                                                          expected.dtype)
    assert list(actual.shape) == list(expected.shape), "%s: shape %s, expected %s" % (
        msg, list(actual.shape), list(expected.shape))
    assert torch.equal(as_exact(actual), as_exact(expected)), "%s:\n%s\nexpected\n%s" % (
        msg, actual, expected)


# A small model and optimizer for the elastic state tests (seeded: equal on every rank).
def make_model(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, optimizer


def train_step(model, optimizer, scale=1.0):
    optimizer.zero_grad()
    (model(torch.ones(4, 3)) * scale).sum().backward()
    optimizer.step()
