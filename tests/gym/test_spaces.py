"""The text spaces: any page text is in them, their charset tables are built once, shared memory round-trips."""
import random

from gymnasium.vector.utils import shared_memory as shm

from bunshin_gym.spaces import any_text, clip_text, text_list


def test_any_text_holds_page_text_and_samples_inside_itself():
    space = any_text(64)
    assert "Prix: 12,50 €\n\tнайти 検索" in space
    assert "x" * 65 not in space
    space.seed(0)
    assert all(space.sample() in space for _ in range(20))


def test_text_spaces_share_one_charset_table():
    a, b = any_text(10), any_text(20, min_length=1)
    assert a.character_index("€") == b.character_index("€")
    assert a._char_index is b._char_index  # built once per process, not once per env (0.25 s of CPU each)
    assert "" not in b and "" in a


def test_shared_memory_round_trip():
    space = text_list(3, 16)
    buf = shm.create_shared_memory(space, n=2)
    shm.write_to_shared_memory(space, 1, ("http://a/é", "b"), buf)
    assert tuple(shm.read_from_shared_memory(space, buf, n=2)[1]) == ("http://a/é", "b")


def test_clip_text_fits_and_says_so():
    text = "".join(random.Random(0).choice("abc\n") for _ in range(500))
    clipped = clip_text(text, 100)
    assert len(clipped) == 100 and clipped.endswith("characters cut]") and clipped in any_text(100)
    assert clip_text("short", 100) == "short"
