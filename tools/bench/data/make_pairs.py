#!/usr/bin/python3
"""Writes paraphrase-pairs.jsonl: labelled question pairs for the response cache's semantic
layer (docs/perf/cache.md). Each line {"a": ..., "b": ..., "same": bool, "kind": ...}:
  paraphrase  b asks what a asks in other words (same: true);
  entity      b asks the same thing of another person or place (same: false);
  negation    b asks the opposite (same: false);
  topic       b asks another question of the same subject (same: false).
Seeded and deterministic: `python3 make_pairs.py > paraphrase-pairs.jsonl`."""
import json
import random

PEOPLE = ["Abraham", "Isaac", "Jacob", "Joseph", "Moses", "Aaron", "Joshua", "Samuel", "David",
          "Solomon", "Elijah", "Elisha", "Daniel", "Ruth", "Esther", "Noah", "Sarah", "Rebekah",
          "Rachel", "Leah", "Gideon", "Samson", "Saul", "Jonathan", "Nathan"]
PLACES = ["Egypt", "Jerusalem", "Babylon", "Bethel", "Hebron", "Canaan", "Jericho", "Sinai",
          "Nineveh", "Galilee", "Bethlehem", "Shiloh", "Gilgal", "Moab", "Edom"]

# (question, paraphrases, negation or None, another question of the subject)
PERSON_T = [
    ("Who was the father of {x}?", ["Who was {x}'s father?", "Name the father of {x}.",
                                    "Tell me who fathered {x}."], None,
     "Who was the mother of {x}?"),
    ("Where was {x} born?", ["In what place was {x} born?", "What was the birthplace of {x}?",
                             "Where did {x} come into the world?"], None,
     "Where did {x} die?"),
    ("Was {x} a king?", ["Did {x} reign as a king?", "Was {x} ever king?"],
     "Was {x} never a king?", "Was {x} a prophet?"),
    ("What did {x} do in old age?", ["In old age, what did {x} do?",
                                     "What did {x} do when he was old?"], None,
     "What did {x} do in youth?"),
    ("Who were the sons of {x}?", ["Name the sons of {x}.", "Which sons did {x} have?",
                                   "List the sons of {x}."], None,
     "Who were the daughters of {x}?"),
]
PLACE_T = [
    ("What happened in {x}?", ["What took place in {x}?", "Tell me what happened at {x}.",
                               "What events happened in {x}?"], None,
     "Who ruled in {x}?"),
    ("Who went down to {x}?", ["Who travelled down to {x}?", "Which people went down into {x}?"],
     "Who never went down to {x}?", "Who came up out of {x}?"),
    ("Is {x} a city?", ["Was {x} a city?", "Is {x} counted a city?"], "Is {x} not a city?",
     "Is {x} a river?"),
]


def main():
    rng = random.Random(20261127)
    out = []
    for names, temps in ((PEOPLE, PERSON_T), (PLACES, PLACE_T)):
        for x in names:
            for q, paras, neg, other in temps:
                a = q.format(x=x)
                out.append({"a": a, "b": rng.choice(paras).format(x=x), "same": True,
                            "kind": "paraphrase"})
                y = rng.choice([n for n in names if n != x])
                out.append({"a": a, "b": q.format(x=y), "same": False, "kind": "entity"})
                if neg:
                    out.append({"a": a, "b": neg.format(x=x), "same": False, "kind": "negation"})
                out.append({"a": a, "b": other.format(x=x), "same": False, "kind": "topic"})
    rng.shuffle(out)
    for p in out:
        print(json.dumps(p))


main()
