"""OSWorld-style desktop content for Bunshin Gym: the desktop (Xvfb + openbox + AT-SPI + apps), OSWorld's
action spaces, task files, evaluators and ~30 shipped tasks with oracle trajectories.

Nothing starts on import. Layout: desktop.py (services, session, observation), a11y.py (AT-SPI → XML),
actions.py (pyautogui / computer_13), tasks.py (schema + config steps), getters/ (the state getters a workspace
runs for the judge), evaluators/ (metrics, the judge's own getters, evaluate: judge-only), judge.py (the judge
outside the workspace), harness.py (reset → config → actions → evaluate), tasks/*.json, oracles/*.json,
task_files/ (given to the agent), judge_files/ (never in a workspace).
"""

from .actions import ACTION_SPACES, Action, ActionError, ActionResult, execute, parse_action, to_pyautogui
from .desktop import (CDP_PORT, DEFAULT_SIZE, VM_HOME, DesktopService, DesktopSession, app_command, desktop_env,
                      desktop_services, prepare_home)
from .errors import (DependencyNotInstalled, DesktopStartError, EvaluatorError, OSWorldError, TaskConfigError,
                     TaskValidationError)
from .harness import EpisodeResult, run_episode, run_trajectory, setup_task
from .tasks import ConfigStep, Evaluator, Task, load_oracle, load_task, load_tasks, run_config, task_from_dict

__all__ = [
    "ACTION_SPACES", "Action", "ActionError", "ActionResult", "execute", "parse_action", "to_pyautogui",
    "CDP_PORT", "DEFAULT_SIZE", "VM_HOME", "DesktopService", "DesktopSession", "app_command", "desktop_env",
    "desktop_services", "prepare_home",
    "DependencyNotInstalled", "DesktopStartError", "EvaluatorError", "OSWorldError", "TaskConfigError",
    "TaskValidationError",
    "GETTERS", "METRICS", "evaluate",
    "EpisodeResult", "run_episode", "run_trajectory", "setup_task",
    "ConfigStep", "Evaluator", "Task", "load_oracle", "load_task", "load_tasks", "run_config", "task_from_dict",
]


def __getattr__(name: str):
    """GETTERS, METRICS and evaluate come from evaluators/, which only the judge's side has (a workspace's code layer
    leaves it out: .workspace-exclude), so they are imported on first use, never by importing this package."""
    if name in ("GETTERS", "METRICS", "evaluate"):
        from . import evaluators

        return getattr(evaluators, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
