"""`make wandb-views`'s online half: whether a W&B server answers, what its project holds, and saving the
reports and the workspace view (reports.dashboard.views builds them offline). Nothing here runs without
WANDB_API_KEY; nothing waits on a server longer than PROBE_SECONDS to learn it is unreachable."""

from __future__ import annotations

import socket
import threading
from collections import Counter
from urllib.parse import urlparse

from headsweep.reports.sweep.cells import ReportError

PROBE_SECONDS = 5  # how long a server may take to take a connection before we call it unreachable
API_TIMEOUT = 30  # seconds per request once it has answered


class ViewsError(ReportError):
    """Bad input found before anything is written or saved: one line per problem."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def server() -> str:
    """The W&B server this machine would talk to (WANDB_BASE_URL, `wandb login --host`, else W&B's own), as
    wandb.Api finds it."""
    from wandb import env
    from wandb.sdk import wandb_setup

    return env.get_base_url(wandb_setup.singleton().settings.base_url)


def reachable(url: str, seconds: float = PROBE_SECONDS) -> bool:
    """Whether url's host takes a connection within `seconds`, its name lookup included (in a thread:
    socket.create_connection's timeout does not cover the lookup)."""
    u = urlparse(url)
    answered = []

    def probe():
        try:
            socket.create_connection((u.hostname, u.port or (443 if u.scheme == "https" else 80)), seconds).close()
            answered.append(True)
        except (OSError, TypeError, ValueError):
            pass

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(seconds)
    return bool(answered)


def connect(entity: str):
    """(wandb.Api, the entity: the one given, else the key's default); one line where the key is refused."""
    import wandb

    try:
        api = wandb.Api(timeout=API_TIMEOUT)
        entity = entity or api.default_entity
    except (wandb.errors.Error, ValueError, OSError) as e:
        raise ViewsError([f"W&B at {server()}: {first_line(e)} (check WANDB_API_KEY)"]) from None
    if not entity:
        raise ViewsError([f"W&B at {server()}: no default entity for this key: pass --entity (ENTITY=...)"])
    return api, entity


def first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def synced_tags(api, entity: str, project: str, sync_hint: str) -> Counter:
    """How many synced runs of the project carry each tag (a sweep's name, q-<id>); one line where the project
    does not exist (or this key cannot see it) or holds no run."""
    path = f"{entity}/{project}"
    try:
        found = bool(api.project(project, entity).id)
    except ValueError:
        found = False
    if not found:
        raise ViewsError(
            [
                f"{path}: no such project on {server()} (the entity or the project does not exist, or this key "
                f"cannot see it): pass --entity/--project (ENTITY=, PROJECT=), or {sync_hint}"
            ]
        )
    counts = Counter(t for run in api.runs(path, per_page=1000) for t in run.tags)
    if not counts:
        raise ViewsError([f"{path}: no synced runs: {sync_hint}"])
    return counts


def save(views: dict) -> list[str]:
    """Each report and the view saved (after synced_tags found the project and its runs); their URLs, the
    view's last."""
    urls = []
    for report in views["reports"].values():
        report.save()
        urls.append(report.url)
    views["workspace"].save()
    return [*urls, views["workspace"].url]
