"""Stop ids: every EOS id a model declares (generation_config.json's eos_token_id list, as
Llama-3 Instruct's [128001, 128008, 128009]) ends a row, in the compiled loop, at its first
occurrence; from-hf carries the ids into the checkpoint meta and to-hf writes them back; a
checkpoint written before the `stop_ids` key loads and stops as before."""

import json

import pytest

import easylemur
from easylemur.checkpoint import model_meta
from easylemur.convert import cli as convert
from easylemur.convert import hf
from easylemur.convert.hf import HFFormatError, declared_eos_ids, stop_ids
from easylemur.tokenizer.spm import Tokenizer
from hf_models import make_hf_model

PROMPT = [5, 17, 300, 2, 41]
K = 4  # the stop id is the token greedy decoding gives the first row at step K


@pytest.fixture(scope="module")
def declared(tmp_path_factory):
    """(hf dir whose generation_config.json lists [EOS, stop], the stop id, prompts, free runs)."""
    path = tmp_path_factory.mktemp("two_eos")
    make_hf_model(num_key_value_heads=2).save_pretrained(path)
    (path / "generation_config.json").unlink(missing_ok=True)
    m = easylemur.load(path)
    assert m.default_stop_ids() == [m.config.eos_token_id]
    free = m.generate([PROMPT], max_new_tokens=12, stop_ids=[])[0]
    k = next(i for i in range(K, len(free)) if free[i] not in free[:i] and free[i] != m.config.eos_token_id)
    stop = free[k]
    # The second row is the first one a token further on: it reaches `stop` one step earlier.
    # The third never produces it within the budget (its own continuation is checked below).
    prompts = [PROMPT, PROMPT + free[:1], [9, 8, 7]]
    frees = m.generate(prompts, max_new_tokens=12, stop_ids=[])
    assert frees[1][: k - 1] == free[1:k]  # decoding a row is decoding its prompt alone
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [m.config.eos_token_id, stop]}))
    return path, stop, prompts, frees, k


def _expected(frees, stop):
    return [row[: row.index(stop)] if stop in row else row for row in frees]


@pytest.mark.slow
def test_generation_stops_at_the_second_declared_eos_in_each_row(declared):
    path, stop, prompts, frees, k = declared
    m = easylemur.load(path)
    assert m.default_stop_ids() == [m.config.eos_token_id, stop]
    got = m.generate(prompts, max_new_tokens=12)
    assert got == _expected(frees, stop)
    assert len(got[0]) == k and len(got[1]) == k - 1  # two rows, stopped at different steps


def _round_trip(src, tmp_path, want):
    """from-hf then to-hf: the checkpoint's meta and the export's generation_config.json (where
    transformers and vLLM read generation stops) keep the ids `want`."""
    assert convert.main(["from-hf", "--hf", str(src), "--out", str(tmp_path / "ck")]) == 0
    assert model_meta.read_meta(tmp_path / "ck").stop_ids == want
    assert convert.main(["to-hf", "--checkpoint", str(tmp_path / "ck"), "--out", str(tmp_path / "out"),
                         "--dtype", "float32"]) == 0
    assert json.loads((tmp_path / "out" / "generation_config.json").read_text())["eos_token_id"] == want
    assert declared_eos_ids(tmp_path / "out") == want


def test_ids_survive_from_hf_checkpoint_to_hf(declared, tmp_path):
    path, stop, prompts, frees, _ = declared
    eos = hf.read_hf_config(path).eos_token_id
    _round_trip(path, tmp_path, [eos, stop])
    m = easylemur.load(tmp_path / "ck")
    assert m.default_stop_ids() == [eos, stop]
    assert m.generate(prompts, max_new_tokens=12) == _expected(frees, stop)


def test_an_eos_list_in_config_json_alone_stops_at_each_and_is_exported(declared, tmp_path):
    """The Llama-3.x-Instruct layout without generation_config.json: config.json's eos_token_id
    list is every stop, not only its first id; the checkpoint and the export keep the list."""
    import shutil

    path, stop, prompts, frees, _ = declared
    src = tmp_path / "cfg_only"
    shutil.copytree(path, src)
    (src / "generation_config.json").unlink()
    cfg = json.loads((src / "config.json").read_text())
    eos = cfg["eos_token_id"]
    (src / "config.json").write_text(json.dumps({**cfg, "eos_token_id": [eos, stop]}))
    assert declared_eos_ids(src) == [eos, stop]
    m = easylemur.load(src)
    assert m.default_stop_ids() == [eos, stop]
    assert m.generate(prompts, max_new_tokens=12) == _expected(frees, stop)
    _round_trip(src, tmp_path, [eos, stop])


def test_checkpoint_without_stop_ids_keeps_eos_only(declared, tmp_path):
    path, stop, _, _, _ = declared
    assert convert.main(["from-hf", "--hf", str(path), "--out", str(tmp_path / "ck")]) == 0
    # rewrite the meta as a checkpoint from before the key
    edited = 0
    for f in (tmp_path / "ck" / "checkpoints" / "0" / "meta").rglob("*"):
        try:
            meta = json.loads(f.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError, IsADirectoryError):
            continue
        if isinstance(meta, dict) and "stop_ids" in meta:
            del meta["stop_ids"]
            f.write_text(json.dumps(meta))
            edited += 1
    assert edited == 1
    saved = model_meta.read_meta(tmp_path / "ck")
    assert "stop_ids" not in saved.meta and saved.stop_ids == []
    eos = saved.model_config.eos_token_id
    m = easylemur.load(tmp_path / "ck")
    assert m.default_stop_ids() == [eos]
    assert convert.main(["to-hf", "--checkpoint", str(tmp_path / "ck"), "--out", str(tmp_path / "out")]) == 0
    assert json.loads((tmp_path / "out" / "generation_config.json").read_text())["eos_token_id"] == eos


class _EotTokenizer:
    """A tokenizer's stop-relevant surface, Llama-3 Instruct's ids."""

    eos_id, im_end_id = 128001, None
    pieces = {"<|eot_id|>": 128009}

    def piece_to_id(self, piece):
        return self.pieces.get(piece)

    def id_to_piece(self, i):
        return {v: k for k, v in self.pieces.items()}.get(i)


def test_one_function_owns_the_set(tmp_path):
    assert stop_ids(128000, _EotTokenizer(), [128001, 128008, 128009]) == [128000, 128001, 128008, 128009]
    assert stop_ids(2, _EotTokenizer()) == [2, 128001, 128009]  # <|eot_id|> without generation_config
    tok = Tokenizer.load()  # the shipped ChatML sentencepiece model: <|im_end|>, no <|eot_id|> (not unk)
    assert stop_ids(tok.eos_id, tok) == sorted({tok.eos_id, tok.im_end_id})
    assert stop_ids(None, None, [7]) == [7]
    assert declared_eos_ids(tmp_path) == []
    for value, want in ((5, [5]), ([5, 9], [5, 9]), (None, [])):
        (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": value}))
        assert declared_eos_ids(tmp_path) == want
    for bad in ('{"eos_token_id": "x"}', '{"eos_token_id": [1, -2]}', "{"):
        (tmp_path / "generation_config.json").write_text(bad)
        with pytest.raises(HFFormatError, match="generation_config.json"):
            declared_eos_ids(tmp_path)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [9, 5]}))
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": [5, 7]}))
    assert declared_eos_ids(tmp_path) == [5, 7, 9]  # config.json's first, then generation_config.json's new ones
