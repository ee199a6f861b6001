"""The grain pipeline: packing, weighted mixing, exact resumable state (across data.prefetch
values), process shares, mesh."""

import gc
import json
import threading
from pathlib import Path

import grain
import numpy as np
import pytest
from ml_collections import ConfigDict

from easylemur.data.mixture import MixIterDataset
from easylemur.data.packing import PackIterDataset
from easylemur.data.pipeline import make_pipeline
from easylemur.data.records import DataError
from easylemur.config import validate_sources
from easylemur.tokenizer.spm import Tokenizer

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data" / "samples"


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.load()


def data_cfg(sources: dict, seq_len=128, prefetch=0, strict=False) -> ConfigDict:
    c = ConfigDict({"seq_len": seq_len, "strict": strict, "prefetch": prefetch,
                    "sources": ConfigDict(sources), "eval_sources": ConfigDict()})
    validate_sources(c.sources, "data.sources")
    return c


def write_docs(path: Path, docs: list[str], field="text") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({field: d}) + "\n" for d in docs))
    return path


# --- packing ---------------------------------------------------------------------------------


def _docs(lengths, start=10):
    out, t = [], start
    for n in lengths:
        ids = np.arange(t, t + n, dtype=np.int32)
        out.append({"ids": ids, "mask": np.r_[0, np.ones(n - 1, np.int8)].astype(np.int8)})
        t += n
    return out


def test_pack_split_fills_rows_exactly():
    docs = _docs([5, 9, 3, 20, 2])
    rows = list(PackIterDataset(grain.MapDataset.source(docs).to_iter_dataset(), 8, True, 0, "s", 10))
    flat = np.concatenate([r["input_ids"][r["segment_ids"] > 0] for r in rows])
    assert flat.tolist() == np.concatenate([d["ids"] for d in docs]).tolist()  # nothing lost or reordered
    assert all((r["segment_ids"] > 0).all() for r in rows[:-1])  # full rows, no padding
    r0 = rows[0]
    assert r0["segment_ids"].tolist() == [1, 1, 1, 1, 1, 2, 2, 2]
    assert r0["positions"].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    assert r0["loss_mask"].tolist() == [0, 1, 1, 1, 1, 0, 1, 1]
    # the 9-token doc continues in row 1 as a new segment with positions from 0
    assert rows[1]["positions"][:6].tolist() == [0, 1, 2, 3, 4, 5]
    assert rows[1]["input_ids"][0] == docs[1]["ids"][3] and rows[1]["loss_mask"][0] == 0


def test_pack_whole_never_splits():
    docs = _docs([5, 4, 8, 1, 3])
    rows = list(PackIterDataset(grain.MapDataset.source(docs).to_iter_dataset(), 8, False, 0, "s", 10))
    segs = [[r["input_ids"][r["segment_ids"] == s].tolist() for s in range(1, r["segment_ids"].max() + 1)] for r in rows]
    assert segs == [[docs[0]["ids"].tolist()], [docs[1]["ids"].tolist()], [docs[2]["ids"].tolist()],
                    [docs[3]["ids"].tolist(), docs[4]["ids"].tolist()]]
    assert rows[0]["segment_ids"].tolist() == [1] * 5 + [0] * 3


def test_mix_shares_exact():
    a = grain.MapDataset.range(10**6).map(lambda i: 0).to_iter_dataset()
    b = grain.MapDataset.range(10**6).map(lambda i: 1).to_iter_dataset()
    c = grain.MapDataset.range(10**6).map(lambda i: 2).to_iter_dataset()
    it = iter(MixIterDataset([a, b, c], [1.0, 2.0, 7.0]))
    got = [next(it) for _ in range(1000)]
    assert np.bincount(got).tolist() == [100, 200, 700]


# --- end to end ------------------------------------------------------------------------------


def test_pretrain_mixture_fractions(tok):
    cfg = data_cfg({"code": {"path": str(SAMPLES / "code"), "weight": 10.0},
                    "text": {"path": str(SAMPLES / "text"), "weight": 1.0}}, seq_len=64)
    it = make_pipeline(cfg, tok, global_batch_size=64, seed=3)
    src = np.concatenate([next(it)["source"] for _ in range(60)])  # 3840 rows
    frac = np.bincount(src, minlength=2) / len(src)
    assert abs(frac[0] - 10 / 11) < 0.02 and abs(frac[1] - 1 / 11) < 0.02
    b = next(it)
    assert {k: (v.dtype, v.shape) for k, v in b.items()} == {
        k: (np.dtype(np.int32), s) for k, s in
        [("input_ids", (64, 64)), ("loss_mask", (64, 64)), ("segment_ids", (64, 64)), ("positions", (64, 64)), ("source", (64,))]}
    assert it.source_names == ["code", "text"]
    counts = it.token_counts()
    assert counts["code"] > 8 * counts["text"] > 0


@pytest.mark.slow
def test_three_sources_weighted(tok, tmp_path):
    srcs = {}
    for i, (name, w) in enumerate([("a", 1.0), ("b", 3.0), ("c", 6.0)]):
        write_docs(tmp_path / f"{name}.jsonl", [f"{name} document {j} " * (j % 7 + 1) for j in range(40)])
        srcs[name] = {"path": str(tmp_path / f"{name}.jsonl"), "weight": w}
    it = make_pipeline(data_cfg(srcs, seq_len=32), tok, global_batch_size=50, seed=0)
    src = np.concatenate([next(it)["source"] for _ in range(60)])
    assert np.allclose(np.bincount(src) / len(src), [0.1, 0.3, 0.6], atol=0.02)
    # every row comes from one source: its tokens decode to that source's text only
    b = next(it)
    for row, s in zip(b["input_ids"], b["source"]):
        text = tok.decode([t for t in row if t > 5])
        assert set(text.split()) <= {["a", "b", "c"][s], "document"} | {str(j) for j in range(40)}


def test_deterministic_for_seed(tok):
    cfg = data_cfg({"text": {"path": str(SAMPLES / "text")}}, seq_len=64)
    a = [next(make_pipeline(cfg, tok, global_batch_size=4, seed=1))["input_ids"] for _ in range(1)][0]
    b = next(make_pipeline(cfg, tok, global_batch_size=4, seed=1))["input_ids"]
    c = next(make_pipeline(cfg, tok, global_batch_size=4, seed=2))["input_ids"]
    assert (a == b).all() and not (a == c).all()


def _batches(it, n):
    return [{k: v.copy() for k, v in next(it).items()} for _ in range(n)]


def _three_sources(prefetch: int) -> ConfigDict:
    return data_cfg({"code": {"path": str(SAMPLES / "code"), "weight": 10.0},
                     "text": {"path": str(SAMPLES / "text"), "weight": 1.0},
                     "chat": {"path": str(SAMPLES / "chat"), "weight": 2.0, "format": "chat"}},
                    seq_len=64, prefetch=prefetch)


def _assert_same(expected, got):
    assert len(expected) == len(got)
    for e, g in zip(expected, got):
        for k in e:
            np.testing.assert_array_equal(e[k], g[k], err_msg=k)


def test_prefetch_does_not_change_batches(tok):
    # data.prefetch is a speed knob: the same batches, counters and state for every value
    runs = {}
    for prefetch in (0, 2):
        with make_pipeline(_three_sources(prefetch), tok, global_batch_size=8, seed=7) as it:
            runs[prefetch] = (_batches(it, 12), it.token_counts(), it.bad_records(), it.get_state())
    _assert_same(runs[0][0], runs[2][0])
    assert runs[0][1:] == runs[2][1:]


@pytest.mark.parametrize("saved,resumed", [(0, 0), (2, 2), (2, 0), (0, 2)])
def test_state_restore_exact(tok, saved, resumed):
    # a run resumes with another data.prefetch and continues as if never interrupted
    it = make_pipeline(_three_sources(saved), tok, global_batch_size=8, seed=7)
    _batches(it, 13)  # mid-epoch, mid-document
    state = json.loads(json.dumps(it.get_state()))  # what a checkpoint stores
    expected = _batches(it, 6)
    it.close()
    it2 = make_pipeline(_three_sources(resumed), tok, global_batch_size=8, seed=7)
    it2.set_state(state)
    got = _batches(it2, 6)
    it2.close()
    _assert_same(expected, got)
    assert it2.token_counts() == it.token_counts() and it2.bad_records() == it.bad_records()


# The state an earlier easylemur saved with data.prefetch=2 (grain's mp_prefetch: one chain per
# worker process, each on its own slice of the data), for one source "text".
OLD_MULTIPROCESS_STATE = {
    "version": 1,
    "grain": {"next_index_in_cycle": 1, "next_index_in_datasets": 2, "iterators_in_use_indices": [0, 1],
              "iterators_in_use_states": [{"parent": {"next_index": 1}, "used": 165, "done": False},
                                          {"parent": {"next_index": 0}, "used": 256, "done": False}],
              "exhausted": [0, 0], "future_states": {}},
    "bad": {"text": {}}, "tokens": {"text": 768}, "shown": {"text": 0}, "sources": ["text"],
}


@pytest.mark.parametrize("prefetch", [0, 2])
def test_old_multiprocess_state_is_a_one_line_error(tok, prefetch):
    cfg = data_cfg({"text": {"path": str(SAMPLES / "text")}}, seq_len=64, prefetch=prefetch)
    with make_pipeline(cfg, tok, global_batch_size=4, seed=0) as it:
        with pytest.raises(DataError) as e:
            it.set_state(OLD_MULTIPROCESS_STATE)
    msg = str(e.value)
    assert "\n" not in msg and "data.prefetch=2" in msg and "cannot carry over" in msg


def test_state_of_another_chain_is_a_data_error(tok):
    # a state that does not fit (here: a mixture's state for one source) is named, not a KeyError
    with make_pipeline(data_cfg({"text": {"path": str(SAMPLES / "text")}}, seq_len=64), tok,
                       global_batch_size=4, seed=0) as it:
        state = it.get_state()
        state["grain"] = {"parents": [state["grain"]], "credit": [0.0], "active": [True]}
        with pytest.raises(DataError, match=r"does not fit the data pipeline of sources \['text'\]"):
            it.set_state(state)


@pytest.mark.parametrize("how", ["close", "dropped"])
def test_no_thread_outlives_the_iterator(tok, how):
    before = set(threading.enumerate())
    it = make_pipeline(_three_sources(2), tok, global_batch_size=8, seed=7)
    _batches(it, 3)
    started = set(threading.enumerate()) - before
    assert started  # the prefetch thread and the read threads ran
    if how == "close":
        it.close()
        it.close()  # idempotent
        with pytest.raises(RuntimeError, match="closed"):
            next(it)
    else:  # never closed: collecting it ends its threads too
        del it
        gc.collect()
    for t in started:
        t.join(timeout=60)  # a bound for a hung thread, not a timing check
    assert not [t.name for t in started if t.is_alive()]


def test_process_shares_disjoint_and_complete(tok, tmp_path):
    docs = [f"doc{j:03d} " + "word " * (j % 13) for j in range(61)]
    path = write_docs(tmp_path / "d.jsonl", docs)
    cfg = data_cfg({"d": {"path": str(path)}}, seq_len=48)
    per_proc = []
    for p in range(2):
        it = make_pipeline(cfg, tok, global_batch_size=4, seed=0, process_index=p, process_count=2,
                           shuffle=False, repeat=False)
        text = "".join(tok.decode([t for t, s in zip(r, g) if s]) for b in it for r, g in zip(b["input_ids"], b["segment_ids"]))
        per_proc.append({w for w in text.split() if w.startswith("doc")})
    assert per_proc[0].isdisjoint(per_proc[1])
    assert per_proc[0] | per_proc[1] == {f"doc{j:03d}" for j in range(61)}
    assert abs(len(per_proc[0]) - len(per_proc[1])) <= 1


def test_eval_mode_ends_and_pads(tok, tmp_path):
    path = write_docs(tmp_path / "e.jsonl", ["short eval doc"] * 5)
    cfg = data_cfg({"d": {"path": str(path)}}, seq_len=16)
    batches = list(make_pipeline(cfg, tok, global_batch_size=4, seed=0, shuffle=False, repeat=False))
    n_tokens = 5 * (len(tok.encode("short eval doc")) + 2)
    assert sum(int((b["segment_ids"] > 0).sum()) for b in batches) == n_tokens
    last = batches[-1]
    assert (last["source"] == -1).any() and (last["segment_ids"][last["source"] == -1] == 0).all()


def test_chat_rows(tok):
    cfg = data_cfg({"chat": {"path": str(SAMPLES / "chat"), "format": "chat"}}, seq_len=256)
    b = next(make_pipeline(cfg, tok, global_batch_size=8, seed=0))
    for row, m, seg in zip(b["input_ids"], b["loss_mask"], b["segment_ids"]):
        for s in range(1, seg.max() + 1):
            ids, mk = row[seg == s], m[seg == s]
            assert ids[0] == tok.bos_id and mk[0] == 0
            # trained runs all end with <|im_end|>\n (unless truncated at the end of the row)
            assert mk[ids == tok.im_start_id].sum() == 0
        assert (m[seg == 0] == 0).all() and (row[seg == 0] == tok.pad_id).all()


def test_mesh_global_arrays(tok):
    import jax

    from easylemur.sharding import make_mesh

    mesh = make_mesh("data:2,fsdp:-1,tensor:1")
    cfg = data_cfg({"text": {"path": str(SAMPLES / "text")}}, seq_len=32)
    b = next(make_pipeline(cfg, tok, global_batch_size=16, seed=0, mesh=mesh))
    assert isinstance(b["input_ids"], jax.Array) and b["input_ids"].shape == (16, 32)
    assert len(b["input_ids"].sharding.device_set) == jax.device_count()
    ref = next(make_pipeline(cfg, tok, global_batch_size=16, seed=0))
    np.testing.assert_array_equal(np.asarray(b["input_ids"]), ref["input_ids"])
