import pytest
import torch

from llmrl.common.threads import torch_threads


def test_torch_threads_sets_the_count_inside_and_restores_it_after() -> None:
    before = torch.get_num_threads()
    inside = 1 if before != 1 else 2
    with torch_threads(inside):
        assert torch.get_num_threads() == inside
    assert torch.get_num_threads() == before


def test_torch_threads_restores_the_count_when_the_body_raises() -> None:
    before = torch.get_num_threads()
    inside = 1 if before != 1 else 2
    with pytest.raises(RuntimeError, match="boom"), torch_threads(inside):
        raise RuntimeError("boom")
    assert torch.get_num_threads() == before
