"""Give the random-weight model's tokenizer one id per word that `installer bench` sends.

usage: python3 benchmarks/h200/word_vocab.py MODEL_DIR

The H200 recipe's model (../shared/tools/h200-vllm/gen_model.py) has a WordLevel vocabulary
"t0".."t102399" with "t0" as the unknown token. `installer bench` writes prompts of common
English words, so every prompt would become 1024 x "t0": identical token ids, which vLLM's
prefix cache serves without any prefill and the benchmark would flatter the engine. Renaming
ids 3..3+len(words) to those words keeps the vocabulary size and the weights, gives each
word its own id, so installer bench's prompts differ from their first token as they do with
a real BPE tokenizer; `vllm bench serve --dataset-name random` still draws random ids.
"""

import json
import sys
from pathlib import Path

from installer.flows.bench import _WORDS

FIRST_ID = 3  # 0: unk, 1: bos, 2: eos


def main(model_dir: str) -> None:
    path = Path(model_dir) / "tokenizer.json"
    tok = json.loads(path.read_text())
    vocab: dict[str, int] = tok["model"]["vocab"]
    by_id = {i: w for w, i in vocab.items()}
    words = list(dict.fromkeys(_WORDS))
    for offset, word in enumerate(words):
        if word in vocab:
            continue  # already renamed by an earlier run
        i = FIRST_ID + offset
        del vocab[by_id[i]]
        vocab[word] = i
    path.write_text(json.dumps(tok))
    print(f"{path}: {len(words)} words at ids {FIRST_ID}..{FIRST_ID + len(words) - 1}")


if __name__ == "__main__":
    main(sys.argv[1])
