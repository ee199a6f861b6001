"""notebooks/colab_smoke.ipynb runs top to bottom on CPU (nbclient, this interpreter's kernel)."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.e2e
def test_colab_smoke_notebook_runs(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    # the kernel inherits the environment: one CPU device (not the test session's 8), its runs here
    monkeypatch.setenv("XLA_FLAGS", "")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("EASYLEMUR_RUNS", str(tmp_path))
    nb = nbformat.read(ROOT / "notebooks" / "colab_smoke.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()

    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert f"easylemur from {ROOT}" in text and "backend: CPU" in text
    assert "tiny_pretrain: loss " in text and "(step 10)" in text and "tiny_chat: loss " in text and "(step 6)" in text
    assert "logits match" in text and "transformers: " in text and "easylemur: " in text
    plots = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(plots) == 1  # the two loss curves
    assert list((tmp_path / "tiny_chat_hf").glob("model*.safetensors"))
