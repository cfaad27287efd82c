"""`bunshin bench figure NAME --quick` for the cheap figures (Fig 1, Fig 12, DeltaBox), and the training-run
figures (Fig 8-11) on a small WebArena run: each writes its JSON beside the paper's numbers and a PNG, and what
it measures holds the figure's claim on this machine."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.figures import FIGURES, run_figure

pytestmark = [pytest.mark.criu, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def _written(out: Path, name: str) -> dict:
    result = json.loads((out / f"{name}.json").read_text())
    assert set(result) == {"figure", "paper", "ours", "machine", "args"} and result["figure"] == name
    assert result["paper"] and result["machine"]["cores"] >= 1
    assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return result


def test_the_cli_lists_every_figure_and_refuses_an_unknown_one():
    run = [sys.executable, "-m", "bunshin_gym.cli", "bench", "figure"]
    listed = subprocess.run(run + ["--list"], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert all(name in listed for name in FIGURES)
    bad = subprocess.run(run + ["fig99"], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode != 0 and "unknown figure 'fig99'" in bad.stderr + bad.stdout


@pytest.mark.browser
def test_fig1_one_groups_envs_share_more_memory_than_envs_of_different_tasks(tmp_path):
    run_figure("fig1", True, tmp_path)
    ours = _written(tmp_path, "fig1")["ours"]
    across, step0 = ours["across_tasks"], ours["group_step0"]
    assert across["mb_per_env"] > 50 and step0["mb_per_env"] > 50, "a WebArena env holds Chromium + the shop"
    # restored from one task snapshot, a group starts from identical memory; different tasks share files mostly
    assert step0["total_pct"] > across["total_pct"] and step0["total_pct"] > 80, ours
    assert across["pct_by_kind"]["file cache"] > 0, ours


@pytest.mark.desktop
def test_fig12_forks_of_an_osworld_env_grow_memory_and_ours_is_written_beside_criu(tmp_path):
    run_figure("fig12", True, tmp_path)
    ours = _written(tmp_path, "fig12")["ours"]
    private = ours["curves"]["private"]
    assert [r["forks"] for r in private] == [2, 4]
    assert private[1]["pss_gb"] > private[0]["pss_gb"], "each CRIU-private fork adds its own copy"
    assert ours["ours_backend"] in ours["curves"] and ours["gb_per_fork"]["private"] > 0


@pytest.mark.browser
def test_deltabox_a_standby_rollback_beats_a_criu_restore_at_every_event(tmp_path):
    run_figure("deltabox", True, tmp_path)
    ours = _written(tmp_path, "deltabox")["ours"]
    assert ours["events"] == len(ours["checkpoint_ms"]) == len(ours["rollback_ms"]) == len(ours["criu_restore_ms"])
    assert ours["events"] >= 2, "one event per replayed oracle step"
    assert all(0 < frozen < wall for frozen, wall in zip(ours["checkpoint_ms"], ours["dump_ms"])), ours
    assert 0 < ours["rollback_ms_p50"] < ours["criu_restore_ms_p50"], ours


@pytest.mark.browser
def test_fig2_each_criu_private_rollout_adds_its_own_copy(tmp_path):
    run_figure("fig2", True, tmp_path)
    ours = _written(tmp_path, "fig2")["ours"]
    private = ours["curves"]["private"]
    assert [r["rollouts"] for r in private] == [2, 4] and ours["max_rollouts"] == 4
    assert private[1]["pss_gb"] > 1.5 * private[0]["pss_gb"], "4 private rollouts hold about twice what 2 do"
    assert ours["ours_backend"] in ours["curves"] and ours["criu_over_ours_at_max"] > 0


@pytest.mark.browser
def test_fig7_replays_one_epoch_per_backend_and_draws_its_memory(tmp_path):
    run_figure("fig7", True, tmp_path)
    ours = _written(tmp_path, "fig7")["ours"]
    backends = {"private", ours["ours_backend"]}
    assert set(ours["peak_mb"]) == set(ours["memory_over_time_mb"]) == backends
    assert all(ours["peak_mb"][b] > 100 for b in backends), "a WebArena epoch's envs hold hundreds of MB"
    kept = [json.loads(p.read_text())["args"]["backend"] for p in (tmp_path / "runs").glob("*/kept.json")]
    assert sorted(kept) == sorted(backends), "one kept run per backend"


@pytest.mark.browser
def test_the_training_figures_share_one_kept_run_whose_rewards_do_not_depend_on_reuse(tmp_path):
    from benchmarks.figures import common, fig8, fig9, fig10, fig11
    from benchmarks.figures.training import TrainingArgs

    # a small WebArena run (the figures' default is OSWorld, minutes per epoch): the same code, one group whose
    # samples follow the oracle (perturb_p 0), so epoch 2 replays what epoch 1 recorded
    args = TrainingArgs(env="BunshinWebArena-v0", tasks=1, group=2, epochs=2, perturb_p=0.0, think_median_s=0.3,
                        settle_max_s=5.0)
    results = {}
    for module in (fig8, fig9, fig10, fig11):
        name = module.__name__.rsplit(".", 1)[1]
        results[name] = common.write_figure(name, module, args, module.run(args, tmp_path), tmp_path)["ours"]
        _written(tmp_path, name)
    assert len(list((tmp_path / "runs").glob("epoch-*/kept.json"))) == 1, "fig 9-11 reuse fig 8's run"
    rewards = results["fig11"]
    assert rewards["identical"] and rewards["rollouts"] == 4, rewards
    hits = results["fig10"]["hit_rate_per_epoch"]["cache_spec"]
    assert hits[1] > 0.5, f"epoch 2 replays epoch 1's trajectories from the cache: {hits}"
    assert results["fig10"]["base_hit_rate_per_epoch"] == [0, 0]
    assert set(results["fig8"]["wall_s"]) == {"base", "spec", "cache_spec"} and results["fig8"]["speedup"]["base"] == 1
    assert results["fig9"]["peak_mb"]["base"] > 0
