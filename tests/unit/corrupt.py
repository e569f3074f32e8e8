"""Hypothesis helper shared by the fuzz tests: damage a parsed document in place."""
from __future__ import annotations

from hypothesis import strategies as st

# What a damaged field may become: wrong types, empty values, odd shapes.
junk = st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=4), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.text(max_size=3), st.one_of(st.integers(), st.text(max_size=3)), max_size=2))


def corrupt(data, doc) -> None:
    """Walk a random path into `doc` (dicts and lists) and replace what is there with junk."""
    path = []
    cur = doc
    while isinstance(cur, (dict, list)) and cur and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(cur) if isinstance(cur, dict) else list(range(len(cur)))))
        path.append((cur, key))
        cur = cur[key]
    if path:
        parent, key = path[-1]
        parent[key] = data.draw(junk)
