"""KV-cache decoding equals decoding by full forward passes; chat prompts stop at <|im_end|>."""

import numpy as np

import easylemur
from easylemur.generate import generate_ids
from hf_models import make_hf_model


def test_cached_greedy_equals_full_recompute(tmp_path):
    make_hf_model(num_key_value_heads=2).save_pretrained(tmp_path)
    m = easylemur.load(tmp_path)
    prompt = [5, 17, 300, 2, 41]
    new = generate_ids(m, prompt, max_new_tokens=12)
    ids = list(prompt)
    for _ in range(12):
        ids.append(int(np.argmax(np.asarray(m.logits([ids]))[0, -1])))
    assert new == ids[len(prompt):]


def test_stop_token_ends_decoding(tmp_path):
    make_hf_model().save_pretrained(tmp_path)
    m = easylemur.load(tmp_path)
    free = generate_ids(m, [1, 2, 3], max_new_tokens=8)
    stopped = generate_ids(m, [1, 2, 3], max_new_tokens=8, stop_ids=[free[3]])
    assert stopped == free[: free.index(free[3])]
