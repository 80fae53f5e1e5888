"""A tiny randomly initialised SmolVLM-architecture (Idefics3) model, built offline in seconds.

For trying the local backend, the RL example and the tests with no download and no GPU: it
generates nonsense, but through the real processor, chat template and ``generate``. About 0.4 MB
on disk: hidden size 32, two layers, a 400-token
byte-level BPE vocabulary trained on countgym's own prompt templates, 32-px images.
"""

from __future__ import annotations

from pathlib import Path

from countgym.envs import templates as T

# SmolVLM's template, trimmed: string or part-list contents, <image> where an image part sits.
CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'] is string %}{{ ': ' + message['content'] }}{% else %}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def build_tiny_smolvlm(out: Path) -> Path:
    """Save a ~0.4 MB Idefics3 model + processor into ``out`` (no hub access)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
        PreTrainedTokenizerFast,
    )

    try:
        from transformers import Idefics3ImageProcessorPil as ImageProcessor
    except ImportError:  # transformers without the PIL/torchvision split
        from transformers import Idefics3ImageProcessor as ImageProcessor

    specials = [
        "<pad>",
        "<|im_start|>",
        "<end_of_utterance>",
        "<image>",
        "<fake_token_around_image>",
        "<global-img>",
    ]
    specials += [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [
        T.DIRECT,
        T.SYSTEM,
        T.TILE,
        T.VERIFY,
        '{"tool":"tag","points":[[120,340]]} ANSWER: 7',
    ] * 5
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<end_of_utterance>",
        bos_token="<|im_start|>",
    )
    # 32-px images, 16-px patches, pixel shuffle 2: one <image> token per image keeps prompts short.
    image_processor = ImageProcessor(
        size={"longest_edge": 32}, max_image_size={"longest_edge": 32}, do_image_splitting=False
    )
    processor = Idefics3Processor(
        image_processor=image_processor,
        tokenizer=fast,
        image_seq_len=1,
        chat_template=CHAT_TEMPLATE,
    )
    cfg = Idefics3Config(
        text_config={
            "model_type": "llama",
            "vocab_size": len(fast),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "max_position_embeddings": 2048,
            "pad_token_id": fast.pad_token_id,
            "bos_token_id": fast.bos_token_id,
            "eos_token_id": fast.eos_token_id,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 16,
        },
        scale_factor=2,
        image_token_id=fast.convert_tokens_to_ids("<image>"),
        pad_token_id=fast.pad_token_id,
    )
    torch.manual_seed(0)
    model = Idefics3ForConditionalGeneration(cfg).eval()
    model.generation_config.pad_token_id = fast.pad_token_id
    model.generation_config.eos_token_id = fast.eos_token_id
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out
