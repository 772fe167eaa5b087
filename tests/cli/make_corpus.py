#!/usr/bin/env python3
"""Writes a generated corpus for the CLI tests (hermetic: no outside file): pseudo-English prose, paragraphs
of 72-column lines with blank lines between, from a fixed seed, in characters Windows-1252 encodes (curly
quotes, dashes, accents).

  make_corpus.py OUT.txt PARAGRAPHS [--seed N] [--encoding cp1252]
"""
import argparse
import random
import textwrap


def corpus(paragraphs, seed):
    rng = random.Random(seed)
    syllables = ["an", "be", "ca", "do", "el", "fi", "go", "ha", "in", "jo", "ka", "le", "mo", "na", "or", "pe",
                 "qu", "ra", "st", "th", "un", "ve", "wa", "ch", "sé", "ré"]
    words = sorted({"".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(600)})
    rng.shuffle(words)
    weights = [1 / (i + 1) for i in range(len(words))]  # Zipf-like: a few words are common
    out = []
    for _ in range(paragraphs):
        sentences = []
        for _ in range(rng.randint(1, 5)):
            s = rng.choices(words, weights, k=rng.randint(4, 18))
            s[0] = s[0].capitalize()
            if rng.random() < 0.2:
                s[rng.randrange(len(s))] += "’s"
            if rng.random() < 0.2:
                s[rng.randrange(len(s))] += "—"
            sentence = " ".join(s).replace("— ", "—") + rng.choice(".....?!;")
            sentences.append(f"“{sentence}”" if rng.random() < 0.25 else sentence)
        out.append(textwrap.fill(" ".join(sentences), 72))
    return "\n\n".join(out) + "\n"


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("paragraphs", type=int)
    p.add_argument("--seed", type=int, default=1399)
    p.add_argument("--encoding", default="utf-8")
    a = p.parse_args()
    with open(a.out, "w", encoding=a.encoding, newline="\n") as f:
        f.write(corpus(a.paragraphs, a.seed))
