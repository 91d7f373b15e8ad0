"""A tiny Qwen3 causal LM and byte-level BPE tokenizer built locally, and its warm-up.

``--tiny`` exists so that the whole training path (real TRL, real pool or episode, real
sandboxes) runs on a CPU in seconds with no hub access. A random model never writes a code
fence or a tool call, so the sandboxes would never run; a few seconds of supervised
"warm-up" on rendered examples of the task format fixes that without patching TRL.

torch, tokenizers, transformers and trl are imported inside the functions only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# A conversation to learn from, and the tools whose schema the chat template renders with it.
Example = tuple[list[dict[str, Any]], list[Any] | None]

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added but not special (as in Qwen): the response parser decodes without skipping special
# tokens, and these must survive decoding for tool calls to be parsed.
ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
VOCAB_SIZE = 1024


def _bpe(lines: Sequence[str], vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    # No word-splitting regex: merges may span spaces, so the boilerplate the model sees on every
    # prompt (tool schema, chat markup, tool-call JSON) becomes a few long tokens. A tool prompt
    # shrinks from ~350 to ~50 tokens, which makes warm-up and every GRPO step several times cheaper.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        # every byte is in the alphabet, so any text stays encodable
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(lines), trainer=trainer)
    tok.add_tokens(ADDED_TOKENS)
    return tok


def _hf_tokenizer(bpe: Any) -> Any:
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_chat_template, qwen3_template

    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        padding_side="left",  # GRPOTrainer generates from left-padded prompts
        model_max_length=4096,
    )
    # Byte-identical to TRL's copy so the trainer recognises it and swaps in its
    # prefix-preserving training variant for tool calling.
    tok.chat_template = qwen3_chat_template
    tok.response_template = qwen3_template
    return tok


def render(tokenizer: Any, examples: Sequence[Example], training_template: bool = False) -> list[str]:
    """Render each example with the chat template as text (optionally the training variant)."""
    from trl.chat_template_utils import get_training_chat_template

    template = (
        get_training_chat_template(tokenizer) if training_template else None
    ) or tokenizer.chat_template
    return [
        tokenizer.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=False)
        for messages, tools in examples
    ]


def build_tiny_model(out_dir: Path, examples: Sequence[Example], seed: int) -> dict[str, Any]:
    """Build and save a tiny random Qwen3 model plus a tokenizer trained on ``examples``.

    The tokenizer's merges are learnt from the rendered examples (system prompt with the tool
    schema, prompts, tool-call JSON), which roughly halves prompt lengths and so the cost of
    every later step. Returns figures for ``metrics.json``.
    """
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    started = time.perf_counter()
    # A throw-away byte-level tokenizer renders the chat markup the real one is trained on.
    boot = _hf_tokenizer(_bpe(["x"], 300))
    corpus = render(boot, examples) + render(boot, examples, training_template=True)
    corpus += [json.dumps(messages) for messages, _ in examples]
    tokenizer = _hf_tokenizer(_bpe(corpus, VOCAB_SIZE - len(ADDED_TOKENS)))
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out_dir)
    model.save_pretrained(out_dir)
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "build_seconds": round(time.perf_counter() - started, 3),
    }


def warm_up(
    model_dir: Path,
    examples: Sequence[Example],
    steps: int,
    seed: int,
    learning_rate: float = 1e-2,
    weights: Sequence[float] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Overfit the model in ``model_dir`` on ``examples`` (loss on assistant tokens only) and save it.

    Examples are rendered exactly as GRPOTrainer renders them (the training template, the same
    tool schema), so the model then samples well-formed code fences or tool calls. ``weights``
    (one per example) sets how often the model should pick each answer when a prompt has
    several. Returns the first and last loss, the step count and the seconds spent.
    """
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import get_training_chat_template

    started = time.perf_counter()
    # A ~100k-parameter model gains nothing from threads, and on a shared machine two threads
    # contending with other processes were measured 7x slower than one.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    template = get_training_chat_template(tokenizer) or tokenizer.chat_template
    rows = []
    for messages, tools in examples:
        enc: Any = tokenizer.apply_chat_template(
            messages,
            tools=tools,
            chat_template=template,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
        rows.append((list(enc["input_ids"]), list(enc["assistant_masks"])))
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for r, (tokens, mask) in enumerate(rows):
        n = len(tokens)
        ids[r, :n] = torch.tensor(tokens)
        attention[r, :n] = 1
        labels[r, :n] = torch.where(torch.tensor(mask).bool(), torch.tensor(tokens), torch.tensor(-100))
    share = torch.tensor(list(weights) if weights is not None else [1.0] * len(rows), dtype=torch.float32)
    share = share / share.sum()
    targets = labels[:, 1:]
    counted = (targets != -100).sum(dim=1).clamp(min=1)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    losses: list[float] = []
    for step in range(steps):
        logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
        per_token = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100, reduction="none"
        ).view(targets.shape)
        loss = ((per_token.sum(dim=1) / counted) * share).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.item()))
        if progress is not None and (step % 40 == 0 or step == steps - 1):
            progress(f"warm-up step {step + 1}/{steps} loss {losses[-1]:.4f}")
    model.save_pretrained(model_dir)
    torch.set_num_threads(threads)
    return {
        "steps": steps,
        "examples": len(rows),
        "tokens_per_example_max": width,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "seconds": round(time.perf_counter() - started, 3),
    }
