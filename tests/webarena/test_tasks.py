"""Task configs: the shipped suite, WebArena-schema files, and configs this env must refuse."""
from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path

import pytest

from envs.webarena.actions import parse_action
from envs.webarena.errors import TaskConfigError
from envs.webarena.tasks import (load_oracle, load_suite, load_task, load_task_file, task_from_dict, task_ids)

DATA = Path(__file__).with_name("data")

REDDIT_TASK = {
    "sites": ["reddit"], "task_id": 27, "require_login": True, "storage_state": "./.auth/reddit_state.json",
    "start_url": "__REDDIT__", "geolocation": None,
    "intent_template": "Tell me the count of comments that have received more downvotes than upvotes for the user "
                       "who made the latest post on the {{forum}} forum.",
    "instantiation_dict": {"forum": "Showerthoughts"},
    "intent": "Tell me the count of comments that have received more downvotes than upvotes for the user who made "
              "the latest post on the Showerthoughts forum.",
    "require_reset": False,
    "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["0"]}, "reference_url": "",
             "program_html": [], "string_note": "", "reference_answer_raw_annotation": "0"},
    "intent_template_id": 33,
}


def test_suite_has_enough_tasks_and_mutating_share():
    suite = load_suite()
    assert len(suite) >= 50
    assert [t.task_id for t in suite] == task_ids()
    mutating = [t for t in suite if t.mutates_state]
    assert len(mutating) / len(suite) >= 0.4
    assert all(t.sites == ("shopping",) for t in suite)
    assert all(t.start_urls[0].startswith("__SHOPPING__") for t in suite)
    kinds = Counter(k for t in suite for k in t.eval.eval_types)
    assert set(kinds) == {"string_match", "url_match", "program_html"}
    assert len({t.intent_template_id for t in suite}) >= 12


def test_every_task_has_an_oracle_that_parses_and_stops():
    for tid in task_ids():
        actions = load_oracle(tid)
        assert actions, tid
        parsed = [parse_action(a) for a in actions]
        assert parsed[-1].name == "stop", tid
        assert all(p.name != "stop" for p in parsed[:-1]), tid


def test_task_round_trips_through_dict():
    for t in load_suite()[:60:7]:
        assert task_from_dict(t.to_dict(), source=t.source) == t


def test_real_webarena_schema_sample_loads():
    tasks = load_task_file(DATA / "webarena_shopping_sample.json")
    assert [t.task_id for t in tasks] == [21, 26, 118, 465, 240]
    t21 = tasks[0]
    assert t21.eval.reference_answers.must_include[0] == "Joseph Brzezinski"
    assert t21.storage_state == "./.auth/shopping_state.json"
    assert t21.intent_template_id == 222
    assert tasks[2].eval.reference_url.startswith("__SHOPPING__/catalogsearch")
    assert tasks[3].eval.program_html[0].locator.startswith("document.querySelector")
    assert tasks[4].eval.reference_answers.fuzzy_match == "N/A"


def test_single_config_file_loads(tmp_path):
    raw = json.loads((DATA / "webarena_shopping_sample.json").read_text())[0]
    p = tmp_path / "21.json"
    p.write_text(json.dumps(raw))
    assert load_task(p).task_id == 21


def test_reddit_task_is_refused_with_a_clear_error():
    with pytest.raises(TaskConfigError) as e:
        task_from_dict(REDDIT_TASK)
    msg = str(e.value)
    assert "task 27" in msg and "reddit" in msg and "shopping" in msg


def test_foreign_placeholder_is_refused():
    raw = copy.deepcopy(json.loads((DATA / "webarena_shopping_sample.json").read_text())[0])
    raw["start_url"] = "__SHOPPING__ |AND| __REDDIT__/forums"
    with pytest.raises(TaskConfigError, match="__REDDIT__"):
        task_from_dict(raw)


@pytest.mark.parametrize("mutate,fragment", [
    (lambda r: r["eval"]["program_html"][0].update(url="func:shopping_get_latest_order_url()"), "func:"),
    (lambda r: r["eval"]["program_html"][0].update(locator="func:get_query_text(__page__, '.x')"), "func:"),
    (lambda r: r["eval"]["program_html"][0].update(prep_actions=["document.x()"]), "prep_actions"),
    (lambda r: r["eval"].update(eval_types=["llm_judge"]), "unsupported eval type"),
    (lambda r: r.update(geolocation={"latitude": 1}), "geolocation"),
    (lambda r: r.pop("intent"), "missing field"),
    (lambda r: r.update(sites=["shopping", "reddit"]), "sites="),
    (lambda r: r["eval"].update(program_html=[]), "needs eval.program_html"),
])
def test_configs_this_env_cannot_honour_are_refused(mutate, fragment):
    raw = copy.deepcopy(json.loads((DATA / "webarena_shopping_sample.json").read_text())[3])
    mutate(raw)
    with pytest.raises(TaskConfigError) as e:
        task_from_dict(raw)
    assert fragment in str(e.value)


def test_missing_task_file_names_the_fix():
    with pytest.raises(TaskConfigError, match="no task file"):
        load_task(99999)


def test_committed_task_files_match_the_generator():
    from envs.webarena.make_tasks import build_specs

    for spec in build_specs():
        on_disk = json.loads((Path(load_task(spec.config["task_id"]).source)).read_text())
        assert on_disk == json.loads(json.dumps(spec.config)), spec.config["task_id"]


@pytest.mark.parametrize("path, bad, field", [
    (("eval", "reference_answers"), 5, "eval.reference_answers"),
    (("intent",), 5, "intent"),
    (("start_url",), ["x"], "start_url"),
    (("require_login",), "yes", "require_login"),
    (("eval", "program_html"), {"url": "last"}, "eval.program_html"),
])
def test_a_field_of_the_wrong_type_raises_value_error_naming_it(path, bad, field):
    from envs.webarena.env import WebArenaAdapter

    adapter = WebArenaAdapter()
    config = copy.deepcopy(adapter.load_task("0").config)
    target = config
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = bad
    with pytest.raises(ValueError, match=f"field '{field}' must be"):
        adapter.load_task(task_config=config)
