"""The lab models' byte-level BPE tokenizer, trained on a fixed corpus so every run gives the same one."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

# Training text for the tokenizer: enough distinct words for the BPE to reach the lab's vocabularies.
CORPUS = [
    "The quick brown fox jumps over the lazy dog while the farmer watches from the gate.",
    "Private language models run on your own servers, behind your own firewall.",
    "An offline bundle carries every wheel, package and weight the hosts need.",
    "Ansible connects over SSH, checks each host, installs the engine and starts the service.",
    "The gateway speaks the OpenAI protocol: chat completions, completions and models.",
    "Tokens stream back to the client one chunk at a time until the model says stop.",
    "Hello! How are you today? I am fine, thank you, and how is the weather over there?",
    "Numbers like 0 1 2 3 4 5 6 7 8 9 10 100 1000 2024 and 3.14159 appear in text too.",
    "System: you are a helpful assistant. User: what is the capital of France? Paris.",
    "Monitoring exports metrics: requests running, queue length, cache usage, latency.",
    "Air-gapped hosts have no route to the internet, so nothing may be fetched at install.",
    "A small model with random weights is enough to prove that serving works end to end.",
    "Keys, certificates and passwords are secrets; they never appear in logs or outputs.",
    "Debian bookworm, systemd units, virtual environments, and a dedicated service user.",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.",
    "Je pense, donc je suis. Der schnelle braune Fuchs. El rápido zorro marrón. 你好世界",
    "def main(): print('hello, world') # code, brackets [ ] { } ( ) and symbols <=> +-*/",
]


def train_byte_level_bpe(vocab_size: int, special_tokens: list[str]) -> Tokenizer:
    """A byte-level BPE of exactly `vocab_size` tokens, `special_tokens` first (ids 0, 1, ...)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer=trainer)
    if tokenizer.get_vocab_size() != vocab_size:
        # Every id the model can sample must decode, so the tokenizer must fill the vocabulary.
        raise AssertionError(f"tokenizer has {tokenizer.get_vocab_size()} tokens, want {vocab_size}")
    return tokenizer
