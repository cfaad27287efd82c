"""OSWorld-style desktop content for Bunshin Gym: the desktop (Xvfb + openbox + AT-SPI + apps), OSWorld's
action spaces, task files, evaluators and ~30 shipped tasks with oracle trajectories.

Nothing starts on import. Layout: desktop.py (services, session, observation), a11y.py (AT-SPI → XML),
actions.py (pyautogui / computer_13), tasks.py (schema + config steps), evaluators/ (getters, metrics,
evaluate), judge.py (the judge outside the workspace), harness.py (reset → config → actions → evaluate),
tasks/*.json, oracles/*.json, task_files/ (given to the agent), judge_files/ (never in a workspace).
"""

from .actions import ACTION_SPACES, Action, ActionError, ActionResult, execute, parse_action, to_pyautogui
from .desktop import (CDP_PORT, DEFAULT_SIZE, VM_HOME, DesktopService, DesktopSession, app_command, desktop_env,
                      desktop_services, prepare_home)
from .errors import (DependencyNotInstalled, DesktopStartError, EvaluatorError, OSWorldError, TaskConfigError,
                     TaskValidationError)
from .evaluators import GETTERS, METRICS, evaluate
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
