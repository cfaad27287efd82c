"""BunshinWebArena-v0 with its site from a Docker image (`site_image`): the stand-in shopping image (nginx +
PHP-FPM + MariaDB from Debian, envs/webarena/standin_image.py; honestly a stand-in for WebArena's Magento image,
which cannot be fetched here) in the session's private dockerd, and WebArena-format task files that use
`__SHOPPING__` (envs/webarena/standin_tasks). One env per module; its episodes fork the live site."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import gymnasium as gym
import pytest

import bunshin_gym  # noqa: F401 - registers the envs
from envs.webarena.errors import TaskConfigError
from forkcore.images import ImageError

pytestmark = [pytest.mark.criu, pytest.mark.browser, pytest.mark.docker, pytest.mark.slow]
TASK_DIR = Path(__file__).resolve().parents[2] / "envs/webarena/standin_tasks"
SITE = "http://127.0.0.1/"


@pytest.fixture(scope="module")
def env(dockerd, standin):
    e = gym.make("BunshinWebArena-v0", site_image=standin, docker_host=dockerd.url, task_dir=str(TASK_DIR),
                 diagnostics=True)
    yield e
    e.close()


def element(obs: dict, role: str, name: str) -> str:
    m = re.search(rf"\[(\d+)\] {role} '{re.escape(name)}'", obs["axtree"])
    assert m, f"no {role} {name!r} in:\n{obs['axtree']}"
    return m.group(1)


def test_the_task_dir_gives_its_shopping_tasks_and_bad_settings_fail_clearly(env, dockerd, standin, tmp_path):
    assert env.unwrapped.adapter.task_ids() == ["900", "901", "902"]
    for f in TASK_DIR.glob("*.json"):
        shutil.copy(f, tmp_path)
    (tmp_path / "77.json").write_text(json.dumps({"sites": ["reddit"], "task_id": 77}))  # another site's task
    e = gym.make("BunshinWebArena-v0", site_image=standin, docker_host=dockerd.url, task_dir=str(tmp_path))
    assert e.unwrapped.adapter.task_ids() == ["900", "901", "902"]
    with pytest.raises(TaskConfigError, match="task_id='77'"):
        e.reset(options={"task_id": "77"})
    e.close()
    with pytest.raises(TaskConfigError, match="give task_config= .* or task_dir="):
        gym.make("BunshinWebArena-v0", site_image=standin, docker_host=dockerd.url).reset()
    missing = gym.make("BunshinWebArena-v0", site_image="bunshin/no-such-site:1", docker_host=dockerd.url,
                       task_config=str(TASK_DIR / "900.json"))
    with pytest.raises(ImageError, match="not in the Docker daemon"):
        missing.reset()
    missing.close()
    with pytest.raises(ValueError, match="give site_image="):
        gym.make("BunshinWebArena-v0", site_port=8080)


def test_a_string_match_task_scores_1_for_the_answer_and_0_for_a_wrong_one(env):
    obs, _ = env.reset(options={"task_id": "900"})
    assert obs["url"] == SITE and "Burr grinder" in obs["axtree"] and "$89.50" in obs["axtree"]
    assert "Sign In" in obs["axtree"], "require_login is false: nobody is signed in"
    *_, reward, terminated, _, _ = env.step("stop [$89.50]")
    assert (reward, terminated) == (1.0, True)
    env.reset(options={"task_id": "900"})
    *_, reward, terminated, _, _ = env.step("stop [$12.99]")
    assert (reward, terminated) == (0.0, True)


def test_a_program_html_task_signs_in_orders_and_each_episode_starts_from_the_images_database(env):
    obs, _ = env.reset(options={"task_id": "901"})
    assert "Welcome, Emma Lopez" in obs["axtree"], "signed in through the Magento-shaped login form"
    qty = element(obs, "spinbutton", "Quantity")
    obs, *_ = env.step(f"type [{qty}] [2] [1]")  # Enter submits the order form
    assert obs["url"] == SITE + "orders.php" and "1 orders, total $25.98" in obs["axtree"], obs["axtree"]
    # a fork continues from the live site (the order is in MariaDB's memory and files) and is isolated
    (clone,) = env.fork(1)
    try:
        obs_c, *_ = clone.step(f"goto [{SITE}order.php?product=1]")
        obs_c, *_ = clone.step(f"click [{element(obs_c, 'button', 'Place order')}]")
        assert "2 orders, total $274.98" in obs_c["axtree"], obs_c["axtree"]
        *_, reward, _, _, _ = clone.step("stop [done]")
        assert reward == 0.0, "the clone ordered more than asked"
    finally:
        clone.close()
    *_, reward, terminated, _, _ = env.step("stop [done]")
    assert (reward, terminated) == (1.0, True), "the clone's order did not reach the source"
    env.reset(options={"task_id": "901"})  # a new episode: the image's database, without the order
    *_, reward, _, _, _ = env.step("stop [done]")
    assert reward == 0.0


def test_a_url_match_task_and_a_cached_episode_equals_the_executed_one(env):
    def run():
        obs, _ = env.reset(options={"task_id": "902"})
        out = [obs["axtree"]]
        obs, _, _, _, info = env.step(f"click [{element(obs, 'link', 'My orders')}]")
        out.append(obs["axtree"])
        *_, reward, _, _, _ = env.step("stop [here]")
        return out + [reward], obs["url"], info["bunshin"]

    first, url, _ = run()
    second, _, info = run()
    assert url == SITE + "orders.php" and first[-1] == 1.0
    assert second == first and info["cache"] == "hit", info


def test_site_setup_runs_in_the_images_root_before_the_base_snapshot(dockerd, standin):
    """`site_setup` (e.g. Magento's base-URL commands): run chrooted in the image once the site answers, with
    {base_url} filled in; what it writes is in every episode. A failing command stops the env, saying which."""
    e = gym.make("BunshinWebArena-v0", site_image=standin, docker_host=dockerd.url,
                 task_config=str(TASK_DIR / "900.json"),
                 site_setup=("echo \"site at {base_url}\" > /var/www/shop/setup.txt",))
    try:
        e.reset()
        obs, *_ = e.step(f"goto [{SITE}setup.txt]")
        assert "site at http://127.0.0.1" in obs["axtree"], obs["axtree"]
        ws = e.unwrapped.live_workspace()
        assert ws.exec(["test", "-e", "/var/www/shop/setup.txt"])["returncode"] != 0, "ran outside the image"
    finally:
        e.close()
    bad = gym.make("BunshinWebArena-v0", site_image=standin, docker_host=dockerd.url,
                   task_config=str(TASK_DIR / "900.json"), site_setup=("echo broken >&2; exit 3",))
    try:
        with pytest.raises(Exception, match=r"site set-up command .* exited with 3: broken"):
            bad.reset()
    finally:
        bad.close()
