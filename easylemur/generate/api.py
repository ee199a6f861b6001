"""`easylemur.load(path)`: the model object users script against."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from easylemur.chat.choice import chat_template_for
from easylemur.convert import hf
from easylemur.errors import InputError
from easylemur.tokenizer.spm import check_text
from easylemur.model.config import LlamaConfig
from easylemur.model.llama import Llama

Messages = Sequence[Mapping[str, str]]
# LoadedModel(chat_template=AUTO): decided by chat_template_for from the tokenizer alone (weights
# built in a process, as a training run's task evals build them)
AUTO = "<auto>"


@dataclasses.dataclass
class LoadedModel:
    config: LlamaConfig
    params: Any  # unscanned nested dict of arrays (in shards over `mesh` when it is set)
    tokenizer: Optional[Any] = None
    path: str = ""
    mesh: Optional[Mesh] = None
    # stop ids the source declares: an HF dir's generation_config.json eos_token_id, a checkpoint's meta stop_ids
    declared_stop_ids: Sequence[int] = ()
    # the chat template chat prompts are rendered with (chat_template_for; None: a base model,
    # no chat) and why that one; AUTO: decided from the tokenizer alone
    chat_template: Optional[str] = AUTO
    chat_template_why: str = ""

    def __post_init__(self):
        if self.chat_template == AUTO:
            self.chat_template, self.chat_template_why = chat_template_for(None, self.tokenizer)
        self._renderer = None
        self._template_where: Optional[str] = None  # a template given by use_chat_template: what names it
        if self.config.scan_layers:
            self.config = dataclasses.replace(self.config, scan_layers=False)
        self._forward = jax.jit(
            lambda params, ids, pos, seg: Llama(self.config, self.mesh).apply({"params": params}, ids, pos, seg)
        )
        self._decoder = None

    @property
    def decoder(self):
        """The decode engine; it keeps its compiled programs for the life of the model."""
        if self._decoder is None:
            from easylemur.generate.engine import Decoder

            self._decoder = Decoder(self.config, self.params, self.mesh)
        return self._decoder

    def logits(self, input_ids, positions=None, segment_ids=None) -> jax.Array:
        """[batch, length] token ids -> [batch, length, vocab] float32 logits."""
        ids = jnp.asarray(np.asarray(input_ids), jnp.int32)
        if ids.ndim == 1:
            ids = ids[None]
        B, T = ids.shape
        pos = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T)) if positions is None else jnp.asarray(positions, jnp.int32)
        seg = jnp.ones((B, T), jnp.int32) if segment_ids is None else jnp.asarray(segment_ids, jnp.int32)
        return self._forward(self.params, ids, pos, seg)

    def default_stop_ids(self) -> list[int]:
        """Every id the model declares as an end (`convert.hf.stop_ids`): EOS, <|im_end|> when
        the tokenizer has ChatML (chat models never train EOS), <|eot_id|> when it has that
        token, and the source's declared ids (generation_config.json's eos_token_id)."""
        return hf.stop_ids(self.config.eos_token_id, self.tokenizer, self.declared_stop_ids)

    def generate(self, prompt_ids: Sequence[Sequence[int]], *, max_new_tokens: int, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int | Sequence[int] = 0,
                 stop_ids: Optional[Sequence[int]] = None, on_token=None) -> list[list[int]]:
        """Decodes a batch of prompts (lists of token ids, any lengths) in one compiled loop;
        returns each prompt's new ids, without the stop id that ended it.

        `stop_ids`: None stops on every id the model declares (`default_stop_ids`); a list stops on
        exactly those ids ([] never stops early). temperature 0 is greedy; top_k 0 and top_p 1
        filter nothing. See `easylemur.generate.Decoder.generate` for `seed` and `on_token`."""
        stops = self.default_stop_ids() if stop_ids is None else list(stop_ids)
        return self.decoder.generate(prompt_ids, max_new_tokens=max_new_tokens, temperature=temperature,
                                     top_k=top_k, top_p=top_p, seed=seed, stop_ids=stops, on_token=on_token)

    def use_chat_template(self, template: Optional[str], why: str) -> None:
        """Chat with `template` from now on (serve/generate --chat-template FILE): `why` names it
        in messages, and in errors about the template itself."""
        self.chat_template, self.chat_template_why, self._renderer = template, why, None
        self._template_where = why

    def chat_renderer(self):
        """The `ChatRenderer` of this model's chat template (chat/renderer.py); an
        InputError saying why for a model without one (a base model: give a template)."""
        from easylemur.chat.renderer import ChatRenderer

        if self.chat_template is None:
            raise InputError(f"{self.path}: no chat template ({self.chat_template_why}), so not a chat model; give it "
                             "one (serve and generate take --chat-template FILE), or complete text instead")
        if self._renderer is None or self._renderer.template != self.chat_template:
            where = self._template_where or f"{self.path}'s chat template"
            self._renderer = ChatRenderer(self._tok(), self.chat_template, where)
        return self._renderer

    def chat_prompt_ids(self, messages: Messages, assistant_prefix: str = "") -> list[int]:
        """A conversation's prompt ids with the generation prompt (then `assistant_prefix`), as
        transformers' apply_chat_template(messages, add_generation_prompt=True) gives them from
        this model's chat template. InputError for a model without one or a conversation its
        template refuses."""
        from easylemur.chat.template import TemplateRejected

        renderer = self.chat_renderer()
        try:
            return renderer.prompt_ids(messages, assistant_prefix)
        except TemplateRejected as e:
            raise InputError(f"{self.path}: {e}") from None

    def _tok(self):
        if self.tokenizer is None:
            raise InputError(f"{self.path}: no tokenizer in this checkpoint; cannot encode a text prompt")
        return self.tokenizer

    def _decode_texts(self, ids: list[list[int]], max_new_tokens: int, stop: Sequence[str], stream: bool,
                      **opts) -> list[str]:
        from easylemur.generate.engine import TextStream, truncate_at_stops

        tok = self._tok()
        if stream and len(ids) != 1:
            raise InputError(f"stream=True prints one prompt's text; got {len(ids)} prompts")
        on_token = TextStream(tok) if stream else None
        new = self.generate(ids, max_new_tokens=max_new_tokens, on_token=on_token, **opts)
        if on_token is not None:
            on_token.finish()
        return [truncate_at_stops(tok.decode(n), stop) for n in new]

    def complete(self, prompts: str | Sequence[str], *, max_new_tokens: int = 128, stop: Sequence[str] = (),
                 stream: bool = False, **opts) -> str | list[str]:
        """Continues text prompts: BOS + the encoded text, as a pre-training document starts.
        Returns the new text of each prompt, cut before the first of the `stop` strings (a
        single string in, a single string out). `opts`: generate()'s temperature, top_k, top_p,
        seed, stop_ids."""
        single = isinstance(prompts, str)
        texts = [prompts] if single else list(prompts)
        for i, t in enumerate(texts):
            check_text(t, "prompt" if single else f"prompt {i}")
        out = self._decode_texts([self.text_prompt_ids(t) for t in texts], max_new_tokens, stop, stream, **opts)
        return out[0] if single else out

    def text_prompt_ids(self, text: str) -> list[int]:
        """A text prompt's ids: BOS (as pre-training documents start) + the text as transformers and
        vLLM encode it (a directory's tokenizer.json)."""
        tok = self._tok()
        return ([tok.bos_id] if tok.bos_id is not None else []) + tok.transformers_encoder.encode(text)

    def chat(self, conversations: str | Messages | Sequence[Messages], *, max_new_tokens: int = 128,
             assistant_prefix: str = "", stop: Sequence[str] = (), stream: bool = False, **opts) -> str | list[str]:
        """The assistant's reply to a conversation, rendered with the model's chat template
        (`chat_prompt_ids`: ChatML's or the tokenizer's own, as its HF export renders it; none for
        a base model: an InputError). A string is one user turn; a list of
        {"role", "content"} is one conversation (returns a string); a list of such lists is a
        batch (returns a list). `assistant_prefix` starts the reply (the turn is left open and
        the model continues it; the prefix is not repeated in the result)."""
        self._tok()
        if isinstance(conversations, str):
            batch, single = [[{"role": "user", "content": conversations}]], True
        elif conversations and isinstance(conversations[0], Mapping):
            batch, single = [list(conversations)], True
        else:
            batch, single = [list(c) for c in conversations], False
        for i, conversation in enumerate(batch):
            for j, message in enumerate(conversation):
                where = (f"conversation {i}, " if not single else "") + f"message {j}"
                check_text(message.get("content", "") if isinstance(message, Mapping) else message, where)
        check_text(assistant_prefix, "assistant_prefix")
        ids = [self.chat_prompt_ids(c, assistant_prefix) for c in batch]
        out = self._decode_texts(ids, max_new_tokens, stop, stream, **opts)
        return out[0] if single else out


def _mesh(mesh: Mesh | str | None) -> Optional[Mesh]:
    if mesh is None or isinstance(mesh, Mesh):
        return mesh
    from easylemur.sharding import make_mesh

    return make_mesh(mesh)


def load(path: str | Path, *, dtype: str | None = None, param_dtype: str = "float32", step: int | None = None,
         mesh: Mesh | str | None = None) -> LoadedModel:
    """Loads an HF Llama directory, an easylemur checkpoint step dir, or a workdir (newest step).

    `dtype` sets the compute dtype (default float32, whatever the checkpoint trained with);
    parameters are held in `param_dtype`. `mesh` (a Mesh or a spec such as
    'data:1,fsdp:2,tensor:4') places the parameters in the training rule table's shardings;
    a scanned checkpoint is restored in shards and unstacked on device."""
    from easylemur.checkpoint import model_meta
    from easylemur.convert.weights import load_weights, one_device_mesh

    path = Path(path)
    overrides = {"param_dtype": param_dtype, "dtype": dtype or "float32"}
    mesh = _mesh(mesh)
    if hf.is_hf_dir(path):
        source, cfg, tokenizer = path, hf.read_hf_config(path, **overrides), _maybe_tokenizer(path)
        declared = hf.declared_eos_ids(path)
        chat = chat_template_for(path, tokenizer)
    else:
        source = model_meta.read_meta(path, step)
        cfg = dataclasses.replace(source.model_config, **overrides)
        declared = source.stop_ids  # [] in checkpoints older than the key: EOS and <|im_end|> as before
        tok_path = source.tokenizer_path()
        tokenizer = None
        if tok_path is not None:
            from easylemur.tokenizer import load_tokenizer

            tokenizer = load_tokenizer(tok_path)
        chat = chat_template_for(source, tokenizer)
    # served unscanned: the decoder's cache is per layer; a scanned checkpoint is restored in
    # shards and unstacked on device
    cfg = dataclasses.replace(cfg, scan_layers=False)
    params = load_weights(source, cfg, mesh if mesh is not None else one_device_mesh())
    return LoadedModel(cfg, params, tokenizer, str(path), mesh, declared, *chat)


def _maybe_tokenizer(path: Path):
    """An HF directory's tokenizer (tokenizer.model, else tokenizer.json), None without one."""
    from easylemur.tokenizer import load_tokenizer, tokenizer_kind

    return load_tokenizer(path) if tokenizer_kind(path) is not None else None
