"""
Passkey retrieval examples in the paper's format (after Mohtashami & Jaggi, 2023):

    <filler> The pass key is 12345. Remember it. 12345 is the pass key. <filler>
    What is the pass key? The pass key is 12345

The filler repeats the paper's sentences; the key sentence sits at a chosen depth (0 = right
after the start, 0.9 = near the end) of the filler. Examples are built in token ids of any
dataset whose vocabulary can spell the template (the built-in corpus and tiny Shakespeare can).
For a model trained with the start token, every prompt and training row begins with it, and a
prompt that "fills n" fills n positions including it. Get one from Dataset.passkey().
"""

import numpy as np
import torch

from common import UserError

FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. "
          "There and back again. ")
KEY_SENTENCE = "The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = "What is the pass key? The pass key is"


class Passkey:
    """Builds examples for one tokenizer (an object with encode/decode); bos_id: the start token
    that begins every prompt and row (None: no start token)."""

    def __init__(self, tokenizer, bos_id=None):
        self.tok = tokenizer
        # what every sequence starts with
        self.head = np.array([] if bos_id is None else [bos_id], dtype=np.int64)
        for text in (FILLER, KEY_SENTENCE.format(key="0123456789"), QUESTION):
            try:
                spelled = tokenizer.decode(tokenizer.encode(text)) == text
            except UserError:  # a character outside the vocabulary
                spelled = False
            if not spelled:
                raise UserError("this dataset's tokenizer cannot spell the passkey template "
                                "(digits or letters missing from its vocabulary); use a dataset "
                                "such as pystdlib or shakespeare_char")
        sentences = [np.asarray(tokenizer.encode(x.strip() + " "), dtype=np.int64)
                     for x in FILLER.replace(". ", ".|").split("|") if x.strip()]
        self.filler = np.concatenate(sentences)
        # where each sentence starts in one period of the filler
        self.starts = np.cumsum([0] + [len(x) for x in sentences[:-1]])
        self.question = np.asarray(tokenizer.encode(QUESTION), dtype=np.int64)

    def answer(self, key):
        return np.asarray(self.tok.encode(f" {key}"), dtype=np.int64)

    def template_len(self, key=10000):
        """Tokens of the key sentence and the question (keys have 5 digits)."""
        return len(self.tok.encode(KEY_SENTENCE.format(key=key))) + len(self.question)

    def shortest(self):
        """The fewest positions an example takes: the start token (if any), the template with no
        filler, and the answer. The one number train.py, passkey.py and reproduce.py check (at
        character level every key takes the same; a subword vocabulary may spell some keys in
        more tokens, and training_rows then draws another key)."""
        return len(self.head) + self.template_len() + len(self.answer(99999))

    def prompt(self, length, depth, key):
        """Exactly `length` positions (the start token included) ending with the question; the
        key sentence at `depth` of the filler."""
        if not 0 <= depth < 1:
            raise UserError(f"depth must be in [0, 1), got {depth}")
        key_ids = np.asarray(self.tok.encode(KEY_SENTENCE.format(key=key)), dtype=np.int64)
        n_fill = length - len(self.head) - len(key_ids) - len(self.question)
        if n_fill < 0:
            raise UserError(f"length {length} is shorter than the passkey template "
                            f"({len(self.head) + len(key_ids) + len(self.question)} tokens); "
                            "use a longer length")
        fill = np.resize(self.filler, n_fill)  # the sentences repeated, cut to size
        period = len(self.filler)
        starts = (np.arange(n_fill // period + 1)[:, None] * period + self.starts).ravel()
        starts = starts[starts <= n_fill]
        # the key goes between two sentences
        cut = int(starts[np.abs(starts - depth * n_fill).argmin()])
        return np.concatenate([self.head, fill[:cut], key_ids, fill[cut:], self.question])

    def training_rows(self, count, length, generator):
        """`count` sequences of `length` tokens, each a prompt and its answer, then filler up to
        `length` (the start token first, if any), with random keys, depths and prompt lengths
        drawn from the torch generator (so training stays reproducible), and a (count, length)
        bool mask of the answer tokens.
        The prompt length varies so that the answer's position does: a model with positions
        (RoPE) otherwise learns to answer only at the one position it was trained at."""
        if length < self.shortest():
            raise UserError(f"rows of {length} tokens cannot hold a passkey example "
                            f"({self.shortest()} tokens)")
        rows, masks = [], []
        for _ in range(count):
            while True:  # with a subword vocabulary a key's token count varies: draw one that fits
                key = int(torch.randint(10000, 100000, (1,), generator=generator))
                ans = self.answer(key)
                shortest = len(self.head) + self.template_len(key)
                if shortest + len(ans) <= length:
                    break
            depth = float(torch.rand(1, generator=generator)) * 0.999
            n = int(torch.randint(shortest, length - len(ans) + 1, (1,), generator=generator))
            row = np.concatenate([self.prompt(n, depth, key), ans,
                                  np.resize(self.filler, length - n - len(ans))])
            rows.append(row)
            masks.append((np.arange(length) >= n) & (np.arange(length) < n + len(ans)))
        return torch.from_numpy(np.stack(rows)), torch.from_numpy(np.stack(masks))


def training_share(ds, frac, batch_size, T):
    """train.py --passkey_frac: the examples' generator and how many rows of every batch of
    batch_size rows of T tokens are passkey examples. (None, 0) for a plain run."""
    n = int(round(frac * batch_size))
    if n == 0:
        return None, 0
    passkey = ds.passkey()
    if passkey.shortest() > T + 1:  # a row holds T + 1 tokens (x and y)
        raise UserError(f"block_size {T} is too short for passkey examples (one takes "
                        f"{passkey.shortest()} tokens: --block_size={passkey.shortest() - 1} "
                        "or more)")
    return passkey, n


def mixed_loss(model, x, y, passkey, n, g):
    """train.py's loss with --passkey_frac: the first n rows of the batch become passkey examples,
    scored on their answer alone; the answer's few tokens get a mean of their own (among the
    text's they would barely count), added to the text rows' mean."""
    B, T = x.shape
    xy, is_answer = passkey.training_rows(n, T + 1, g)            # (n, T + 1) tokens, answer mask
    x, y = x.clone(), y.clone()                                    # (B, T): they viewed one tensor
    x[:n], y[:n] = xy[:, :-1].to(x.device), xy[:, 1:].to(x.device)
    y[:n][~is_answer[:, 1:].to(x.device)] = -1                     # passkey rows: the answer alone
    _, tok = model(x, y, reduction="none")                         # (B, T), 0 where y = -1
    loss = tok[:n].sum() / (y[:n] >= 0).sum()
    return loss + tok[n:].mean() if n < B else loss
