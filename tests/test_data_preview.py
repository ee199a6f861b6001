"""`python -m easylemur.data preview`: what the model will see, run in-process through the CLI's
own `main` (a subprocess would add nothing but start-up time)."""

import json

import pytest

from easylemur.data.__main__ import main


def run(capsys, *args):
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_preview_json_pretrain(capsys):
    # both override spellings: --config.k=v and --config.k v
    rc, out, err = run(capsys, "preview", "--config", "configs/tiny_pretrain.py", "--rows", "12", "--format", "json",
                       "--config.data.seq_len=64", "--config.data.prefetch", "0")
    assert rc == 0, err
    rows = [json.loads(l) for l in out.splitlines()]
    assert len(rows) == 12
    for row in rows:
        assert row["source"] in ("code", "text")
        assert len(row["input_ids"]) == len(row["loss_mask"]) == len(row["segment_ids"]) == 64
        assert all(isinstance(t, str) and t for t in row["trained_text"])
        # text documents train every token but a document's first (BOS) one
        assert sum(row["loss_mask"]) == sum(1 for s in row["segment_ids"] if s) - len(set(row["segment_ids"]) - {0})
    assert {r["source"] for r in rows} == {"code", "text"}  # 10:1 -> one text row in 11
    assert "bad records" in err


def test_preview_chat_trains_only_assistant_turns(capsys):
    rc, out, err = run(capsys, "preview", "--config", "configs/tiny_chat.py", "--rows", "3", "--config.data.prefetch=0")
    assert rc == 0, err
    spans = [span for row in map(json.loads, out.splitlines()) for span in row["trained_text"]]
    # each span is one assistant message's content, <|im_end|> and "\n" (the content may be cut
    # short where a long conversation was truncated to seq_len); headers never train
    assert all("<|im_start|>" not in s and "<|im_end|>" not in s.removesuffix("<|im_end|>\n") for s in spans), spans
    assert sum(s.endswith("<|im_end|>\n") for s in spans) >= len(spans) - 3


def test_preview_text_chat(capsys):
    rc, out, err = run(capsys, "preview", "--config", "configs/tiny_chat.py", "--rows", "2", "--format", "text",
                       "--config.data.prefetch=0")
    assert rc == 0, err
    assert "=== row 0  source=chat" in out and "<|im_start|>assistant\n⟦" in out
    assert "<|im_end|>\n⟧" in out


def test_preview_errors_and_help(capsys):
    rc, _, err = run(capsys, "preview", "--config", "configs/tiny_pretrain.py", "--config.data.sources.code.wieght=3")
    assert rc == 2 and "data.sources.code.wieght" in err
    with pytest.raises(SystemExit) as e:
        main(["preview", "--config", "configs/tiny_pretrain.py", "--config.data.seq_len"])
    assert e.value.code == 2 and "needs a value" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["preview", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "--rows" in out and "--format" in out


def test_data_errors_are_one_line_exit_2(capsys, tmp_path):
    import zstandard

    lines = "".join(json.dumps({"text": f"doc {i} " * 50}) + "\n" for i in range(200)).encode()
    zst = zstandard.ZstdCompressor().compress(lines)
    cut = tmp_path / "cut.jsonl.zst"
    cut.write_bytes(zst[: len(zst) // 25])
    base = ["preview", "--config", "configs/tiny_pretrain.py", "--config.data.prefetch=0"]
    rc, out, err = run(capsys, *base, f"--config.data.sources.code.path={cut}")
    assert rc == 2 and out == ""
    assert err.startswith("error: source 'code': ") and f"{cut}: truncated zstd file" in err
    assert err.count("\n") == 1  # one line, no traceback
    rc, _, err = run(capsys, *base, f"--config.data.sources.text.path={tmp_path / 'missing'}")
    assert rc == 2 and err.count("\n") == 1 and f"source 'text': {tmp_path / 'missing'}: no such file" in err
    rc, _, err = run(capsys, *base, "--rows", "0")
    assert rc == 2 and err == "error: --rows must be at least 1, got 0\n"
    # --debug: the same error with its traceback
    rc, _, err = run(capsys, *base, f"--config.data.sources.code.path={cut}", "--debug")
    assert rc == 2 and "Traceback" in err and f"{cut}: truncated zstd file" in err.splitlines()[-1]


@pytest.mark.slow
def test_one_bad_line_is_reported_and_counted_once(capsys, tmp_path):
    lines = [json.dumps({"text": f"document {i} " * 20}) for i in range(6)]
    lines.insert(3, "{not json")
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    # 48 rows of 256 tokens read these ~400 tokens of code dozens of times over (epochs): the
    # bad line is met in each, and is still one bad record
    rc, out, err = run(capsys, "preview", "--config", "configs/tiny_pretrain.py", "--rows", "48",
                       f"--config.data.sources.code.path={tmp_path}")
    assert rc == 0, err
    assert len(out.splitlines()) == 48
    assert err.count("skipped bad record") == 1 and f"{tmp_path / 'a.jsonl'}:4: malformed_json" in err, err
    assert "easylemur.data: bad records skipped: 'code': 1 (malformed_json 1)" in err, err
