# lmcore.torch's flex attention for PyTorch users, and the defects issue 17 lists for attention:
# exceptions in Python callables, callable & MaskMod, masks built for another batch.
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import lmcore
from conftest import BUILD


def test_python_exception_in_a_threaded_kernel_is_raised_and_exit_is_prompt():
    # A Python mask_mod / score_mod raising inside a 2-thread kernel: the exception reaches the caller
    # (twice, so a pool that kept the first would keep it at exit), and the interpreter exits at once.
    body = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(BUILD / 'python')!r})
        import numpy as np, lmcore
        lmcore.set_num_threads(2)
        def bad_score(s, b, h, q, kv):
            if q == 100: raise KeyError("score boom")
            return s
        def bad_mask(b, h, q, kv):
            if q == 100: raise KeyError("mask boom")
            return True
        x = np.random.rand(1, 4, 256, 16).astype(np.float32)
        for _ in range(2):
            try:
                lmcore.flex_attention(x, x, x, score_mod=bad_score)
            except KeyError as e:
                print("raised", e)
            try:
                lmcore.create_block_mask(bad_mask, 1, 1, 256, 256, 16, 16)
            except KeyError as e:
                print("raised", e)
        print("end")
    """)
    r = subprocess.run([sys.executable, "-c", body], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, LMCORE_NUM_THREADS="2"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n") == ["raised 'score boom'", "raised 'mask boom'"] * 2 + ["end", ""]


def test_callable_and_maskmod_compose_from_either_side():
    def even(b, h, q, kv):
        return (q + kv) % 2 == 0

    causal = lmcore.MaskMod.causal()
    for m in (even & causal, causal & even):
        assert [m.allowed(0, 0, 3, kv) for kv in range(5)] == [False, True, False, True, False]
    for m in (even | causal, causal | even):
        assert [m.allowed(0, 0, 2, kv) for kv in range(5)] == [True, True, True, False, True]
    with pytest.raises(ValueError, match="expected a lmcore.MaskMod or a callable"):
        _ = 3 & causal


@pytest.mark.parametrize("mask", ["built-in", "callable"])
def test_mask_built_for_another_batch_is_an_error(mask):
    x = np.random.default_rng(0).standard_normal((2, 2, 16, 8)).astype(np.float32)
    mm = lmcore.MaskMod.causal() if mask == "built-in" else (lambda b, h, q, kv: kv <= q)
    for B, H in [(3, 1), (1, 4)]:
        bm = lmcore.create_block_mask(mm, B, H, 16, 16, 8, 8)
        with pytest.raises(lmcore.Error, match="block mask was built for"):
            lmcore.flex_attention(x, x, x, block_mask=bm)
    for B, H in [(2, 2), (1, 1), (2, 1)]:
        lmcore.flex_attention(x, x, x, block_mask=lmcore.create_block_mask(mm, B, H, 16, 16, 8, 8))
